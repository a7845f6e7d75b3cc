"""Discrete-event simulation of programs from profiled costs: ``simulate(program, costs, *, seed) -> Timeline``."""

from simulator.engine import replay, simulate

__all__ = ["replay", "simulate"]
