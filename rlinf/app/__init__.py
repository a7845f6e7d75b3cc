"""The application: training runs (the runner), profiling, auto-planning, validation, checkpoints, run
directories and jobs (workloads made trainable). The commands parse arguments and print; the work is here."""
