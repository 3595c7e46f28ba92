'use strict';
// SPDX-License-Identifier: MIT
//
// A Faktory server that stores nothing and answers every command at once: the
// Node client's own ceiling, for bench/faktory/faktory-node.js. FETCH always
// hands out a fresh job; PUSH, ACK, FAIL and BEAT are +OK; PUSHB is {}.
// Usage: node stub-server.js [port]  (0 picks one); prints {"listen":"HOST:PORT"}.
const net = require('net');

const port = Number(process.argv[2] || 0);
const GREETING = '+HI {"v":2}\r\n';
let seq = 0;

function bulk(s) {
  return `$${Buffer.byteLength(s)}\r\n${s}\r\n`;
}

function reply(line) {
  const sp = line.indexOf(' ');
  const cmd = sp < 0 ? line : line.slice(0, sp);
  switch (cmd) {
    case 'HELLO': case 'PUSH': case 'ACK': case 'FAIL': case 'BEAT':
    case 'FLUSH': case 'MUTATE': case 'QUEUE':
      return '+OK\r\n';
    case 'PUSHB':
      return bulk('{}');
    case 'FETCH': {
      const n = seq++;
      return bulk(`{"jid":"stub-${n}","jobtype":"j","queue":"bench","args":[{"n":${n}}]}`);
    }
    case 'INFO':
      return bulk('{"faktory":{"tasks":{}},"server_utc_time":"0"}');
    default:
      return `-ERR unknown command ${cmd}\r\n`;
  }
}

const server = net.createServer((sock) => {
  sock.setNoDelay(true);
  let buf = '';
  sock.write(GREETING);
  sock.on('data', (chunk) => {
    buf += chunk.toString('utf8');
    let out = '';
    let nl;
    while ((nl = buf.indexOf('\r\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      if (line === 'END') {
        if (out) sock.write(out);
        sock.end();
        return;
      }
      out += reply(line);
    }
    if (out) sock.write(out);
  });
  sock.on('error', () => {});
});

server.listen(port, '127.0.0.1', () => {
  const a = server.address();
  process.stdout.write(JSON.stringify({ listen: `${a.address}:${a.port}` }) + '\n');
});
