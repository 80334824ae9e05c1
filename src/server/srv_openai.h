/*
 * srv_openai.h — OpenAI request bodies (/v1/chat/completions, /v1/completions)
 * validated into one plain struct. No engine, tokenizer or template work here:
 * this is the part a fuzzer can reach with arbitrary bytes.
 *
 *   srv_request r; char param[64]; kiln_err err;
 *   if (srv_parse_request(SRV_API_CHAT, body, len, &r, param, &err) != KILN_OK)
 *       reply 400 naming param;
 *   ...
 *   srv_request_free(&r);
 *
 * Unknown fields are ignored. Types and ranges are checked; an error names the
 * offending field in *param. Roles are system, developer (rendered as system),
 * user, assistant and tool; content is a string, null (assistant/tool) or an
 * array of {"type": "text", "text": ...} parts, joined into one string.
 */
#ifndef KILN_SRV_OPENAI_H
#define KILN_SRV_OPENAI_H

#include "model/mdl_lora.h"
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/eng_engine.h"

typedef enum { SRV_API_CHAT, SRV_API_COMPLETION, SRV_API_ANTHROPIC, SRV_API_RESPONSES } srv_api;

/* Which sampling fields the request gave (the rest come from server defaults). */
enum {
    SRV_SET_TEMPERATURE = 1u << 0,
    SRV_SET_TOP_P = 1u << 1,
    SRV_SET_TOP_K = 1u << 2,
    SRV_SET_MIN_P = 1u << 3,
    SRV_SET_REP = 1u << 4,
    SRV_SET_SEED = 1u << 5,
};

#define SRV_MAX_N 16 /* most choices one request may ask for */

/* tool_choice */
typedef enum { SRV_TOOLS_AUTO, SRV_TOOLS_NONE, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED } srv_tool_choice;

/* the output's format (srv_constraint.c) */
typedef enum { SRV_FMT_TEXT, SRV_FMT_JSON_OBJECT, SRV_FMT_JSON_SCHEMA, SRV_FMT_GRAMMAR } srv_format;

typedef struct {
    srv_api api;
    char *model;             /* OWNED; NULL when absent */
    /* LoRA adapters to stack, in order (the `adapters` field; docs/lora.md) */
    bool has_adapters;       /* the field was given (an empty list = the base model) */
    int32_t n_adapters;
    char *adapter_names[MDL_LORA_MAX_STACK]; /* OWNED */
    float adapter_scales[MDL_LORA_MAX_STACK];
    json_t *messages;        /* OWNED (chat): normalized copy, content a string or null */
    json_t *tools;           /* OWNED or NULL (never an empty array) */
    srv_tool_choice tool_choice;
    char *tool_name;         /* OWNED: the function tool_choice names (SRV_TOOLS_NAMED) */
    bool parallel_tool_calls; /* default true; false keeps the first call only */
    char *prefill;           /* OWNED or NULL: text appended to the rendered prompt, as if the
                                model had written it (a forced tool-call opening) */
    json_t *template_kwargs; /* OWNED object, never NULL after a successful parse */
    bool thinking_set;       /* the request decided enable_thinking (kwargs or reasoning_effort) */
    bool add_generation_prompt;
    char *prompt;            /* OWNED (completion, text form), NUL-terminated */
    size_t prompt_len;
    int32_t *prompt_ids;     /* OWNED (completion, token form) */
    int32_t n_prompt_ids;
    int64_t max_tokens;      /* 0 = unset */
    eng_sampling sp;         /* fields named by `set`; sp.logit_bias == bias */
    unsigned set;            /* SRV_SET_* */
    eng_bias *bias;          /* OWNED [n_bias] */
    char *stop[ENG_MAX_STOP]; /* OWNED */
    int n_stop;
    bool logprobs;           /* report logprobs (chat: logprobs; completions: logprobs >= 0) */
    int32_t top_logprobs;    /* 0..ENG_MAX_TOP_LOGPROBS */
    int32_t n;               /* 1..SRV_MAX_N */
    bool stream, include_usage, echo, ignore_eos, skip_special;
    /* constrained output (srv_constraint.c) */
    srv_format format;
    json_t *schema;          /* OWNED: the JSON Schema (SRV_FMT_JSON_SCHEMA) */
    bool schema_strict;      /* json_schema.strict: no unlisted properties unless allowed */
    char *grammar;           /* OWNED: GBNF text (SRV_FMT_GRAMMAR) */
    char format_param[24];   /* the field the format came from, for errors */
    /* Responses API (srv_responses.c) */
    bool store;              /* keep this response for previous_response_id */
    bool instructions;       /* messages[0] came from `instructions` (not carried on) */
    char *previous_response_id; /* OWNED or NULL */
    json_t *resp_echo;       /* OWNED or NULL: the request's fields a response object repeats
                                (instructions, tools, tool_choice, temperature, top_p,
                                metadata, parallel_tool_calls, max_output_tokens) */
    /* speculative decoding (docs/speculative.md): "speculative": {"method":
     * "ngram"|"off", "max_draft": N}, a method string, or a boolean */
    eng_spec_method spec;    /* ENG_SPEC_DEFAULT: the server's */
    int32_t spec_max_draft;  /* 0: the server's */
} srv_request;

/* API */
/* Parses body[0..len) (any bytes). On success *out holds owned fields (free
 * with srv_request_free); on failure *out needs no freeing, param (>= 64 bytes)
 * names the offending field ("" for the body itself) and the code is
 * KILN_E_INVALID or KILN_E_UNSUPPORTED (or KILN_E_NOMEM). */
kiln_code srv_parse_request(srv_api api, const char *body, size_t len, srv_request *out,
                            char *param, kiln_err *err);
void srv_request_free(srv_request *r); /* zeroes *r; a zeroed request is a no-op */

#endif
