/*
 * srv_toolreq.h — the tool fields of a chat request: `tools`, `tool_choice`,
 * `parallel_tool_calls`, and assistant `tool_calls` normalised for templates.
 *
 *   srv_parse_tools(root, &req, param, &err);   // from srv_parse_request, after messages
 *
 * Normalisation: each assistant tool_calls[i].function.arguments given as a
 * JSON string is parsed into an object (templates write `arguments | tojson`);
 * a string that is not a JSON object stays a string. A missing `type` becomes
 * "function". tool_choice "none" drops the tools (the model never sees them);
 * a named choice keeps only that tool.
 */
#ifndef KILN_SRV_TOOLREQ_H
#define KILN_SRV_TOOLREQ_H

#include <jansson.h>

#include "server/srv_openai.h"

/* API */
/* Fills r->tools, tool_choice, tool_name, parallel_tool_calls and rewrites
 * r->messages' tool_calls. KILN_E_INVALID names the field in param. */
kiln_code srv_parse_tools(const json_t *root, srv_request *r, char *param, kiln_err *err);

#endif
