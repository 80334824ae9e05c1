/*
 * srv_constraint.h — what a request asks its output to be, compiled into one
 * grammar for the engine (grammar/gr.h, docs/structured-output.md):
 *   - response_format {"type": "json_object"} / {"type": "json_schema",
 *     "json_schema": {"name", "schema", "strict"}}; the Responses API's
 *     text.format (rewritten to response_format by srv_responses.c);
 *   - llama.cpp's `grammar` (GBNF) and `json_schema` fields;
 *   - tool calls: tool_choice required / named: the whole call in the
 *     model's own syntax (Hermes/Qwen JSON, Qwen3-Coder XML, Llama 3 JSON,
 *     Mistral [TOOL_CALLS], Gemma 4's call:N{key:<|"|>v<|"|>} with its
 *     special tokens) with the arguments under the tool's `parameters`
 *     schema (FunctionGemma: the forced opening only); auto:
 *     free text, but a call, once its marker appears, follows the same
 *     syntax.
 * With a reasoning model the output may (or, when the prompt opened one,
 * must) start with a think block; the constraint applies after it.
 *
 *   srv_parse_format(root, &req, param, &err);               // while parsing
 *   char *pf = srv_tool_prefill(family, &req, tok);          // forced call opening
 *   srv_constraint_build(&req, &cx, &grammar, trig, &ntrig, &e);
 *
 * Errors name the request field ("response_format", "json_schema", "grammar",
 * "tools"): a schema or grammar kiln cannot enforce exactly, or one over the
 * compile limits, is a 400, never a looser constraint.
 */
#ifndef KILN_SRV_CONSTRAINT_H
#define KILN_SRV_CONSTRAINT_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/gr.h"
#include "server/srv_error.h"
#include "server/srv_openai.h"
#include "server/srv_reasoning.h"
#include "server/srv_toolcall.h"

#define SRV_MAX_TRIGGERS 4

typedef struct {
    srv_tc_family family;        /* tool-call syntax; SRV_TC_NONE: no tools */
    bool think_open;             /* the prompt ends inside an open think block */
    bool think_maybe;            /* the model may open a think block itself */
    srv_think_style think_style; /* its tags */
    const tok_tokenizer *tok;    /* BORROWED */
    int32_t ws_max;              /* JSON whitespace between tokens (--grammar-ws) */
    int32_t compile_ms;          /* CPU time a compile may take (--grammar-compile-ms; 0 = none) */
    gr_cache *cache;             /* BORROWED compile cache (--grammar-cache); NULL = none */
} srv_cctx;

/* API */
/* response_format / grammar / json_schema of a chat or completion body into
 * r->format, r->schema, r->schema_strict, r->grammar. */
kiln_code srv_parse_format(const json_t *root, srv_request *r, char *param, kiln_err *err);
/* What the model is made to write first when a call is required or named
 * (the family's opening markup; for a named call, up to its arguments).
 * OWNED string or NULL. */
char *srv_tool_prefill(srv_tc_family f, const srv_request *r, const tok_tokenizer *tok);
/* The grammar of the request's output, compiled: *g OWNED (gr_grammar_release),
 * NULL when the output is free; trig[0..*n_trig) (SRV_MAX_TRIGGERS) special
 * tokens after which it starts. 0, or -1 with *e (a 400 naming the field).
 * With cx->cache, an identical earlier build (same schema/grammar text, tools,
 * tool_choice, API, think context and options) is reused, not compiled. */
int srv_constraint_build(const srv_request *r, const srv_cctx *cx, gr_grammar **g, int32_t *trig,
                         int32_t *n_trig, srv_error *e);

#endif
