"""Rule engine: rule files (rules/*.toml), configuration, baselines, and running them over a trace."""

from traceview.rules.config import RuleConfig, find_config, load_config, with_flags
from traceview.rules.engine import CheckResult, Finding, Skipped, check
from traceview.rules.loader import Rule, load_rule, load_rules

__all__ = ["CheckResult", "Finding", "Rule", "RuleConfig", "Skipped", "check", "find_config", "load_config",
           "load_rule", "load_rules", "with_flags"]
