"""The prompt pool (Redis) from Python: load a dataset, claim prompts under a lease, complete them
exactly once, give them back; the same keys and Lua scripts as the TypeScript `PromptPool`, so
that both languages share one pool. Needs redis-py (a dependency of the package).

    import redis
    from laminar.data.prompts import PromptPool

    pool = PromptPool.open(redis.Redis.from_url("redis://127.0.0.1:6379"))
    # or any --redis address: connect("redis+sentinel://s1:26379,s2:26379,s3:26379/laminar?replicas=1")
    pool.load_jsonl("train.jsonl")
    claims = pool.claim("rollout-0", count=4)
"""

from .errors import DataNotFoundError, OwnershipError
from .pool import CompleteResult, LoadReport, PoolProgress, PromptClaim, PromptPool, Rejection
from .prompt import group_id_of, parse_group_id, validate_prompt
from .redis_address import Replication, connect, mask_password, replication_of

__all__ = [
    "CompleteResult",
    "DataNotFoundError",
    "LoadReport",
    "OwnershipError",
    "PoolProgress",
    "PromptClaim",
    "PromptPool",
    "Rejection",
    "Replication",
    "connect",
    "group_id_of",
    "mask_password",
    "parse_group_id",
    "replication_of",
    "validate_prompt",
]
