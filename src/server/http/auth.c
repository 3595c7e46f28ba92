/* SPDX-License-Identifier: MIT
 *
 * Bearer-token authentication for the HTTP frontend: parsing "ROLE:TOKEN"
 * and "ROLE@NAME:TOKEN" specs and checking a request's Authorization header against them. Tokens
 * are compared in constant time (no early exit on the first differing byte)
 * so response timing does not leak a token's prefix. A request that passes
 * learns who made it (er_caller: role and name, never the token).
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

static bool name_char_ok(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

static const struct {
    const char *name;
    er_role role;
} roles[] = {
    {"producer", ER_ROLE_PRODUCER},
    {"worker", ER_ROLE_WORKER},
    {"admin", ER_ROLE_ADMIN},
    {"viewer", ER_ROLE_VIEWER},
};

const char *er_role_name(er_role role)
{
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (roles[i].role == role)
            return roles[i].name;
    return "";
}

/* The messages name what is wrong, never any part of the spec: a token
 * given in the wrong place must not reach a terminal or a log. */
int er_token_parse(const char *spec, er_token *out, er_error *err)
{
    if (!spec)
        return er_error_set(err, ER_EINVAL, "token", "token spec is missing");
    const char *colon = strchr(spec, ':');
    if (!colon)
        return er_error_set(err, ER_EINVAL, "token", "token must be ROLE:TOKEN or ROLE@NAME:TOKEN");
    const char *at = memchr(spec, '@', (size_t)(colon - spec));
    size_t rlen = (size_t)((at ? at : colon) - spec);
    er_role role = 0;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strlen(roles[i].name) == rlen && memcmp(roles[i].name, spec, rlen) == 0)
            role = roles[i].role;
    if (!role)
        return er_error_set(err, ER_EINVAL, "token",
                            "role must be producer, worker, admin or viewer");
    const char *name = at ? at + 1 : colon;
    size_t nlen = (size_t)(colon - name);
    if (at && (nlen == 0 || nlen > ER_TOKEN_NAME_MAX))
        return er_error_set(err, ER_EINVAL, "token",
                            "token name (after @) must be 1..%d characters", ER_TOKEN_NAME_MAX);
    for (size_t i = 0; i < nlen; i++)
        if (!name_char_ok((unsigned char)name[i]))
            return er_error_set(err, ER_EINVAL, "token",
                                "token name may only contain A-Z a-z 0-9 . _ -");
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
    memcpy(out->name, name, nlen);
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

/* A viewer may read (ER_ACCESS_READ, a dashboard page) and nothing else;
 * what it reads is redacted by the writers (job_json.c), not here. */
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

const er_token *er_http_token_find(const er_server *s, const char *tok, size_t len)
{
    size_t match = s->ntokens;
    if (len > 0 && len < 128) {
        /* Every configured token is compared, match or not; the first match wins. */
        for (size_t i = 0; i < s->ntokens; i++) {
            int eq = ct_equal(tok, len, s->tokens[i].token);
            match = eq && match == s->ntokens ? i : match;
        }
    }
    return match == s->ntokens ? NULL : &s->tokens[match];
}

int er_http_authorize(const er_server *s, const char *authorization, er_access access,
                      er_caller *who, er_error *err)
{
    who->role = ER_ROLE_NONE;
    who->name = "";
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
    const er_token *t = er_http_token_find(s, tok, len);
    if (!t)
        return er_error_set(err, ER_EAUTH, "authorization", "unknown token");
    /* known from here, also when refused for its role (the access log says who) */
    who->role = t->role;
    who->name = t->name;
    if (!er_http_role_allows(who->role, access))
        return er_error_set(err, ER_EPERM, "authorization",
                            "this token's role may not call this endpoint");
    return 0;
}
