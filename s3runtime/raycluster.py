"""Ray plumbing shared by the Ray backends of training (training/rollouts/ray_backend.py) and evaluation (eval/ray_eval.py).

    ray = connect(cfg.ray)                            # a local cluster on 127.0.0.1, or the configured address
    pool = WorkerPool.start("rollout", MyActor, [args] * n, cpus=0.5, rc=cfg.ray)
    outputs = pool.map("rollout", shards)             # one shard per free worker; a lost worker's shard is redone
    pool.close()

Ray does the cluster work: actors restart on their own (`max_restarts`), their CPUs (fractions allowed) come from a
placement group, big objects travel through the object store. What is ours: which shard goes where, and that a shard
whose worker died (`RayActorError`) is redone exactly once on the restarted actor, with the loss counted
(`WorkerPool.lost`, `WorkerPool.redone`) so the step's metrics say so.

Network rule: a local cluster stays on loopback. Ray 2.60 advertises the machine's interface address by default, even
with `_node_ip_address="127.0.0.1"`; with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 every node is 127.0.0.1 (checked by
`node_addresses()` in the tests).

Ray is optional (`pip install 's3-search-agents[ray]'`): nothing here imports it before a Ray backend is asked for.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3core.credentials import redact
from s3core.errors import ConfigError, S3Error
from s3runtime.config import RayConfig

__all__ = ["RayWorker", "WorkerLost", "WorkerPool", "connect", "node_addresses", "require_ray", "worker_threads"]

RAY_PIN = "ray==2.60.0"


class WorkerLost(S3Error):
    """A Ray worker died more often than ray.max_restarts allows, or did not come back."""

    code = "ray_worker_lost"


def require_ray() -> Any:
    """The ray module, or a ConfigError that names the fix."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"a Ray backend (training.backend / eval.backend = 'ray', `s3 eval --ray`) needs Ray: "
            f"pip install 's3-search-agents[ray]' (or {RAY_PIN}); or set the backend to 'local'"
        ) from None
    return ray


def connect(rc: RayConfig) -> Any:
    """Ray, initialized: an already running session is reused; ray.address = none starts a local cluster bound to
    127.0.0.1 (dashboard off); otherwise the configured cluster is joined."""
    if rc.address is None:
        # keep every node on loopback (see the module docstring); vLLM workers likewise. Ray reads this variable when
        # it is imported (its worker processes inherit it), so it is set before the import
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if rc.address is None:
        from ray._private import ray_constants

        # ray was imported before this call (the variable came too late for this process): the same switch, by hand
        ray_constants.ENABLE_RAY_CLUSTER = False
        ray.init(num_cpus=rc.num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 configure_logging=False)
    else:
        ray.init(address=rc.address, log_to_driver=False, configure_logging=False)
    return ray


def node_addresses() -> list[str]:
    """The advertised address of every live node of the connected cluster."""
    ray = require_ray()
    return [str(n["NodeManagerAddress"]) for n in ray.nodes() if n.get("Alive")]


def worker_threads(cpus: float) -> int:
    """torch threads of a worker that reserved `cpus` CPUs.

    >>> worker_threads(0.5), worker_threads(1.0), worker_threads(2.6)
    (1, 1, 3)
    """
    return max(1, round(cpus))


class RayWorker:
    """What every actor of a WorkerPool answers besides its work: ping (alive and constructed), pid, node (address),
    node_id, cwd."""

    def ping(self) -> bool:
        return True

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        import ray

        return str(ray.util.get_node_ip_address())

    def node_id(self) -> str:
        """The Ray node this actor runs on (its id: on one machine every node has the address 127.0.0.1)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def cwd(self) -> str:
        """This actor's working folder (its node's: scripts/ray_cluster.py starts each node in a folder of its own)."""
        return os.getcwd()


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    return (ray.exceptions.RayActorError,)  # ActorDiedError / ActorUnavailableError are subclasses


@dataclass
class WorkerPool:
    """A fixed set of restartable actors of one kind, and the shards they run.

    `revive(i)` runs after worker i came back from a restart and before its shard is redone (e.g. the current
    weights go into its new engine). `on_submit(pool, i)` is called after a shard was sent to worker i: a test hook
    (fault injection), None in real runs."""

    kind: str
    actors: list[Any]
    placement_group: Any = None
    revive: Callable[[int], None] | None = None
    on_submit: Callable[[WorkerPool, int], None] | None = None
    max_restarts: int = 3
    revive_timeout_s: float = 600.0
    lost: int = 0
    redone: int = 0
    restarts: list[int] = field(default_factory=list)
    last_redone: list[int] = field(default_factory=list)  # shards of the last `map` that were redone

    @classmethod
    def start(
        cls,
        kind: str,
        actor_cls: Any,
        args: Sequence[tuple[Any, ...]],
        *,
        rc: RayConfig,
        cpus: float,
        gpus: float = 0.0,
        max_concurrency: int = 1,
        resources: dict[str, float] | None = None,
    ) -> WorkerPool:
        """One actor per entry of `args` (its constructor arguments), each reserving `cpus` / `gpus` (and the custom
        `resources`: a node's label, e.g. {"rollout_node": 1}) in one bundle of a placement group (ray.placement),
        restarted up to ray.max_restarts times."""
        ray = require_ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        remote_cls = ray.remote(actor_cls)
        pg = None
        if rc.placement != "none":
            bundle: dict[str, float] = {"CPU": cpus}
            if gpus:
                bundle["GPU"] = gpus
            bundle.update(resources or {})
            pg = ray.util.placement_group([dict(bundle) for _ in args], strategy=rc.placement.upper())
            ready, _ = ray.wait([pg.ready()], timeout=300)
            if not ready:
                ray.util.remove_placement_group(pg)
                raise S3Error(
                    f"Ray could not place {len(args)} {kind} worker(s) of {cpus} CPU / {gpus} GPU"
                    f"{' / ' + str(resources) if resources else ''} each within 300 s "
                    f"(cluster resources: {ray.available_resources()}); lower ray.{kind}_workers or their CPUs"
                )
        actors = []
        for i, a in enumerate(args):
            opts: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus, "max_restarts": rc.max_restarts,
                                    "max_task_retries": 0, "max_concurrency": max_concurrency}
            if resources:
                opts["resources"] = dict(resources)
            if pg is not None:
                opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=i)
            actors.append(remote_cls.options(**opts).remote(*a))
        pool = cls(kind=kind, actors=actors, placement_group=pg, max_restarts=rc.max_restarts,
                   restarts=[0] * len(actors))
        pool.call_all("ping")  # constructors done (engines loaded) before the first shard is timed
        return pool

    def __len__(self) -> int:
        return len(self.actors)

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """`method(*args)` on every worker, in worker order (a lost worker is waited for and asked again)."""
        ray = require_ray()
        out: list[Any] = []
        for i, actor in enumerate(self.actors):
            for attempt in range(self.max_restarts + 2):
                try:
                    out.append(ray.get(getattr(actor, method).remote(*args)))
                    break
                except _lost_errors(ray) as e:
                    if attempt > self.max_restarts:
                        raise WorkerLost(f"{self.kind} worker {i} is gone ({type(e).__name__})") from None
                    self._wait_alive(i)
        return out

    def pids(self) -> list[int]:
        return [int(p) for p in self.call_all("pid")]

    def _wait_alive(self, i: int) -> None:
        """Block until worker i answers a ping again (Ray restarts it on its own), or raise WorkerLost."""
        ray = require_ray()
        deadline = time.monotonic() + self.revive_timeout_s
        while True:
            try:
                ray.get(self.actors[i].ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return
            except ray.exceptions.ActorDiedError as e:
                # used-up restarts, or its constructor raised (a bad path or model on that node): Ray's text says which
                raise WorkerLost(
                    f"{self.kind} worker {i} died and will not restart (ray.max_restarts={self.max_restarts}): "
                    f"{redact(str(e))[:1000]}"
                ) from None
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    raise WorkerLost(f"{self.kind} worker {i} did not come back within {self.revive_timeout_s:.0f} s") from None
                time.sleep(0.2)

    def map(self, method: str, shards: Sequence[tuple[Any, ...]], first: Sequence[int] | None = None) -> list[Any]:
        """The outputs of `imap`, in shard order."""
        out: list[Any] = [None] * len(shards)
        for j, value in self.imap(method, shards, first):
            out[j] = value
        return out

    def imap(
        self, method: str, shards: Sequence[tuple[Any, ...]], first: Sequence[int] | None = None
    ) -> Iterator[tuple[int, Any]]:
        """(shard index, output) of `method(*shard)` for every shard as each finishes, each shard on a free worker
        (`first[j]`: where shard j goes first, e.g. worker j). A shard whose worker is lost mid-call is redone once the
        worker is back, on the next free worker; its lost attempt never returns, so nothing is counted twice."""
        ray = require_ray()
        todo: deque[int] = deque(range(len(shards)))
        attempts = [0] * len(shards)
        free = deque(range(len(self.actors)))
        inflight: dict[Any, tuple[int, int]] = {}  # ref -> (shard, worker)
        self.last_redone = []

        def submit(j: int, w: int) -> None:
            attempts[j] += 1
            ref = getattr(self.actors[w], method).remote(*shards[j])
            inflight[ref] = (j, w)
            if self.on_submit is not None:
                self.on_submit(self, w)

        if first is not None:  # the first round: the requested placement
            for j in list(todo):
                w = first[j]
                if w in free:
                    free.remove(w)
                    todo.remove(j)
                    submit(j, w)
        try:
            while todo or inflight:
                while todo and free:
                    submit(todo.popleft(), free.popleft())
                ready, _ = ray.wait(list(inflight), num_returns=1)
                j, w = inflight.pop(ready[0])
                try:
                    value = ray.get(ready[0])
                except _lost_errors(ray) as e:
                    self.lost += 1
                    self.redone += 1
                    self.last_redone.append(j)
                    self.restarts[w] += 1
                    if attempts[j] > self.max_restarts:
                        raise WorkerLost(f"{self.kind} shard {j} failed {attempts[j]} times; last: {type(e).__name__}") from None
                    self._wait_alive(w)
                    if self.revive is not None:
                        self.revive(w)
                    todo.appendleft(j)
                    free.append(w)
                    continue
                free.append(w)
                yield j, value
        finally:
            for ref in inflight:  # an abandoned map (an error, a closed generator) leaves nothing queued
                with contextlib.suppress(Exception):
                    ray.cancel(ref)

    def close(self) -> None:
        """Kill the actors (no restart) and free their placement group."""
        ray = require_ray()
        if not ray.is_initialized():
            return
        for a in self.actors:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(a, no_restart=True)
        self.actors = []
        if self.placement_group is not None:
            ray.util.remove_placement_group(self.placement_group)
            self.placement_group = None
