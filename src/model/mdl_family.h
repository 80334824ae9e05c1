/*
 * mdl_family.h — the family rules of mdl_plan_build that live in files of
 * their own (mdl_plan.c keeps the Llama family's). Each fills p->layer[] and
 * the model-wide fields; p->n_layers, hidden, vocab and the layer array are set.
 */
#ifndef KILN_MDL_FAMILY_H
#define KILN_MDL_FAMILY_H

#include "model/mdl_plan.h"

/* mdl_plan_gemma.c */
kiln_code mdl_plan_gemma3(const wt_config *c, mdl_plan *p, kiln_err *err);
kiln_code mdl_plan_gemma4(const wt_config *c, mdl_plan *p, kiln_err *err);

#endif
