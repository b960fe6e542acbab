"""A reward service for an RL trainer: submit a candidate's source, await its Result and its reward.

    service = RewardService("level2/51", options=Options(device="cuda", store_path=None))
    future = await service.submit(source)      # waits while the queue is full (backpressure)
    scored = await future                      # Scored(reward, result, terms)
    batch = await service.score_many(sources)  # a step's rollouts, in order

The reward is `rl.reward_of` (KernelEnv's, RewardConfig documents it), so a trainer moving from
KernelEnv to a cluster keeps its reward. Judging runs on the cluster's judge actors (backend.JudgePool:
one per GPU, a dead actor's candidate judged again elsewhere); the trainer's event loop never blocks:
each evaluation waits in one of as many threads as there are judges. At most `max_pending`
candidates are submitted and not finished: `submit` waits for room, so a trainer producing rollouts
faster than the cluster judges them is slowed down instead of piling them up in memory.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kerneljudge.cluster.backend import JudgePool, connect
from kerneljudge.cluster.task import JudgeTask
from kerneljudge.options import Options
from kerneljudge.records import Result
from kerneljudge.rl import RewardConfig, reward_of


@dataclass(frozen=True)
class Scored:
    """One candidate's reward, its terms (rl.reward_of) and the judge's full Result."""

    reward: float
    result: Result
    terms: dict[str, Any]


class RewardService:
    """Rewards for candidates of `problem` (a built-in name or a path; `submit` may name another).

    `options` are the judge's for every candidate (default: the store off, as KernelEnv); `address`
    the Ray cluster ("auto": the running one); `judges` the number of judge actors (default one per GPU);
    `max_pending` the bound of the queue. When `options.store_path` is set the driver (this process)
    records each result, as a batch does."""

    def __init__(self, problem: str | Path, *, options: Options | None = None, reward: RewardConfig = RewardConfig(),
                 address: str | None = "auto", judges: int | None = None, max_pending: int = 256,
                 pool: JudgePool | None = None):
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.problem = problem
        self.options = options if options is not None else Options(store_path=None)
        self.reward = reward
        self.max_pending = max_pending
        self.pool = pool or JudgePool(connect(address), judges=judges, device=self.options.device)
        self._threads = ThreadPoolExecutor(self.pool.count, thread_name_prefix="kj-reward")
        self._room: asyncio.Semaphore | None = None
        self._ids = itertools.count()
        self.pending = 0

    async def submit(self, source: str, problem: str | Path | None = None) -> "asyncio.Future[Scored]":
        """Queue one candidate (the full text of its .py file); waits while `max_pending` are in flight.
        The future's result is its Scored; a candidate's failure is a reward of 0, never an exception."""
        if self._room is None:
            self._room = asyncio.Semaphore(self.max_pending)
        await self._room.acquire()
        self.pending += 1
        future = asyncio.ensure_future(self._score(source, problem or self.problem))
        future.add_done_callback(self._release)
        return future

    def _release(self, _future) -> None:
        self.pending -= 1
        self._room.release()

    async def score(self, source: str, problem: str | Path | None = None) -> Scored:
        return await (await self.submit(source, problem))

    async def score_many(self, sources: Iterable[str], problem: str | Path | None = None) -> list[Scored]:
        """A batch of rollouts, scored in the order given (judged as judges come free)."""
        futures = [await self.submit(source, problem) for source in sources]
        return list(await asyncio.gather(*futures))

    async def _score(self, source: str, problem: str | Path) -> Scored:
        verb = "evaluate" if self.options.timing.enabled else "check"
        with tempfile.TemporaryDirectory(prefix="kj-reward-") as folder:
            path = Path(folder) / "candidate.py"
            path.write_text(source)
            task = JudgeTask.of(f"reward-{next(self._ids)}", problem, path, self.options, verb)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._threads, self.pool.judge, task)
        if self.options.store_path is not None:
            await loop.run_in_executor(self._threads, self._record, result, source, verb)
        reward, terms = reward_of(result, self.reward)
        return Scored(reward, result, terms)

    def _record(self, result: Result, source: str, verb: str) -> None:
        from kerneljudge.store import Store

        Store(self.options.store_path).record(result, verb=verb, source=source, options=self.options.to_json())

    def close(self) -> None:
        """Stop the judges (evaluations in flight end) and the threads."""
        self.pool.stop()
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> "RewardService":
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()
