"""The prompt pool (Redis) from Python: load a dataset, claim prompts under a lease, complete them
exactly once, give them back; the same keys and Lua scripts as the TypeScript `PromptPool`, so
that both languages share one pool. Needs redis-py (a dependency of the package).

    import redis
    from laminar.data.prompts import PromptPool

    pool = PromptPool.open(redis.Redis.from_url("redis://127.0.0.1:6379"))
    pool.load_jsonl("train.jsonl")
    claims = pool.claim("rollout-0", count=4)
"""

from .errors import DataNotFoundError, OwnershipError
from .pool import CompleteResult, LoadReport, PoolProgress, PromptClaim, PromptPool, Rejection
from .prompt import group_id_of, parse_group_id, validate_prompt

__all__ = [
    "CompleteResult",
    "DataNotFoundError",
    "LoadReport",
    "OwnershipError",
    "PoolProgress",
    "PromptClaim",
    "PromptPool",
    "Rejection",
    "group_id_of",
    "parse_group_id",
    "validate_prompt",
]
