"""The functional core: values every other part shares (cluster, workflow, plan, program, trace, timeline, cost
model), the M2Flow lowering, errors and input checks. It imports nothing of rlinf's other layers."""
