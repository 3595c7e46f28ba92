/* SPDX-License-Identifier: MIT
 *
 * Bearer-token authentication for the HTTP frontend: parsing "ROLE:TOKEN"
 * specs and checking a request's Authorization header against them. Tokens
 * are compared in constant time (no early exit on the first differing byte)
 * so response timing does not leak a token's prefix.
 */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "server/http/http_internal.h"

static bool token_char_ok(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '~' || ch == '+' || ch == '/' || ch == '=' ||
           ch == '-';
}

int er_token_parse(const char *spec, er_token *out, er_error *err)
{
    static const struct {
        const char *name;
        er_role role;
    } roles[] = {
        {"producer", ER_ROLE_PRODUCER}, {"worker", ER_ROLE_WORKER}, {"admin", ER_ROLE_ADMIN}};
    if (!spec)
        return er_error_set(err, ER_EINVAL, "token", "token spec is missing");
    const char *colon = strchr(spec, ':');
    if (!colon)
        return er_error_set(err, ER_EINVAL, "token", "token must be ROLE:TOKEN");
    size_t rlen = (size_t)(colon - spec);
    er_role role = 0;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strlen(roles[i].name) == rlen && memcmp(roles[i].name, spec, rlen) == 0)
            role = roles[i].role;
    if (!role)
        return er_error_set(err, ER_EINVAL, "token", "role must be producer, worker or admin");
    const char *tok = colon + 1;
    size_t tlen = strlen(tok);
    if (tlen < 16 || tlen >= sizeof out->token)
        return er_error_set(err, ER_EINVAL, "token", "token must be 16..%zu characters",
                            sizeof out->token - 1);
    for (size_t i = 0; i < tlen; i++)
        if (!token_char_ok((unsigned char)tok[i]))
            return er_error_set(err, ER_EINVAL, "token",
                                "token may only contain A-Z a-z 0-9 . _ ~ + / = -");
    memset(out, 0, sizeof *out);
    out->role = role;
    memcpy(out->token, tok, tlen);
    return 0;
}

/* 1 when equal. Runs over the whole fixed-size buffer whatever the inputs. */
static int ct_equal(const char *given, size_t glen, const char stored[128])
{
    unsigned char diff = 0;
    size_t slen = strnlen(stored, 128);
    diff |= (unsigned char)(glen != slen);
    for (size_t i = 0; i < 128; i++) {
        unsigned char a = i < glen ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(a ^ (unsigned char)stored[i]);
    }
    return diff == 0;
}

const char *er_http_role_name(er_role role)
{
    switch (role) {
    case ER_ROLE_PRODUCER: return "producer";
    case ER_ROLE_WORKER: return "worker";
    case ER_ROLE_ADMIN: return "admin";
    }
    return "none";
}

bool er_http_role_allows(er_role role, er_access access)
{
    switch (access) {
    case ER_ACCESS_OPEN:
    case ER_ACCESS_READ:
    case ER_ACCESS_UI:
        return true;
    case ER_ACCESS_PRODUCE:
        return role == ER_ROLE_PRODUCER || role == ER_ROLE_ADMIN;
    case ER_ACCESS_WORK:
        return role == ER_ROLE_WORKER || role == ER_ROLE_ADMIN;
    case ER_ACCESS_ADMIN:
        return role == ER_ROLE_ADMIN;
    }
    return false;
}

er_role er_http_token_role(const er_server *s, const char *tok, size_t len)
{
    er_role role = 0;
    if (len > 0 && len < 128) {
        /* Every configured token is compared, match or not. */
        for (size_t i = 0; i < s->ntokens; i++) {
            int eq = ct_equal(tok, len, s->tokens[i].token);
            role = eq && !role ? s->tokens[i].role : role;
        }
    }
    return role;
}

int er_http_authorize(const er_server *s, const char *authorization, er_access access,
                      er_role *role_out, er_error *err)
{
    if (role_out)
        *role_out = ER_ROLE_ADMIN;
    if (access == ER_ACCESS_OPEN || s->ntokens == 0)
        return 0;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return er_error_set(err, ER_EAUTH, "authorization",
                            "an Authorization: Bearer <token> header is required");
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t len = strlen(tok);
    while (len > 0 && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
        len--;
    er_role role = er_http_token_role(s, tok, len);
    if (!role)
        return er_error_set(err, ER_EAUTH, "authorization", "unknown token");
    if (role_out)
        *role_out = role;
    if (!er_http_role_allows(role, access))
        return er_error_set(err, ER_EPERM, "authorization",
                            "this token's role may not call this endpoint");
    return 0;
}
