"""The analytic model of LLM-scale RL: roofline costs, decode simulated step by step, length distributions,
synthesized traces, calibration against measured runs, and the import of other systems' logs."""
