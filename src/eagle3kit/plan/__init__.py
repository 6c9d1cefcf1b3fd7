"""`eagle3kit plan`: will speculation pay, and what would it take? Plain arithmetic, no torch.

forecast.py holds the cycle model's answers (accept length, throughput, break-even, targets,
best depth, one request end to end); cycle.py the cycle cost (whole, or drafting + a verify
fit or measured points) and its validation; plots.py the PNG (matplotlib, imported lazily).
"""

from eagle3kit.plan.cycle import (
    MAX_DEPTH_LIMIT,
    CycleModel,
    VerifyFit,
    VerifyPoints,
    make_baseline,
    make_cycle,
    parse_verify_fit,
    parse_verify_point,
)
from eagle3kit.plan.forecast import (
    DEFAULT_DEPTH,
    DEFAULT_MAX_DEPTH,
    Acceptance,
    DepthPoint,
    PlanResult,
    RequestResult,
    TargetResult,
    accept_len,
    accept_len_const,
    make_acceptance,
    plan,
    rate_for_accept_len,
    request_tps,
)
from eagle3kit.plan.from_file import load_per_position

__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_MAX_DEPTH",
    "MAX_DEPTH_LIMIT",
    "Acceptance",
    "CycleModel",
    "DepthPoint",
    "PlanResult",
    "RequestResult",
    "TargetResult",
    "VerifyFit",
    "VerifyPoints",
    "accept_len",
    "accept_len_const",
    "load_per_position",
    "make_acceptance",
    "make_baseline",
    "make_cycle",
    "parse_verify_fit",
    "parse_verify_point",
    "plan",
    "rate_for_accept_len",
    "request_tps",
]
