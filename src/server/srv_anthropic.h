/*
 * srv_anthropic.h — Anthropic Messages API (/v1/messages) requests, mapped
 * onto the same srv_request the OpenAI routes use (api SRV_API_ANTHROPIC), so
 * one generation path serves both. Text, tool_use, tool_result and thinking
 * blocks; images are refused; n is always 1.
 *
 *   if (srv_parse_anthropic(body, len, &r, param, &err)) reply 400;
 */
#ifndef KILN_SRV_ANTHROPIC_H
#define KILN_SRV_ANTHROPIC_H

#include "server/srv_openai.h"

/* API */
/* Same contract as srv_parse_request. */
kiln_code srv_parse_anthropic(const char *body, size_t len, srv_request *out, char *param,
                              kiln_err *err);
/* count_only: the body of /v1/messages/count_tokens (max_tokens not required). */
kiln_code srv_parse_anthropic_ex(const char *body, size_t len, bool count_only, srv_request *out,
                                 char *param, kiln_err *err);

#endif
