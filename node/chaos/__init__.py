"""Fault scenarios against the real stack, checked by the history checker.

``streamwal chaos`` (:mod:`node.chaos.cli`) runs them; tests run them with fewer rounds.
"""

from node.chaos.env import ChaosEnv
from node.chaos.result import ScenarioResult, markdown_table, text_table
from node.chaos.runner import run_scenario, run_scenarios
from node.chaos.scenarios import SCENARIOS, Scenario

__all__ = [
    "SCENARIOS",
    "ChaosEnv",
    "Scenario",
    "ScenarioResult",
    "markdown_table",
    "run_scenario",
    "run_scenarios",
    "text_table",
]
