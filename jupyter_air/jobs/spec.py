"""What to run and how: a workload, as the magic, the decorator and the CLI describe it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

OutputRanks = Literal["all", "0", "none"]
Backend = Literal["local", "ray"]


@dataclass
class Workload:
    """One submission's description; stored as JSON with the job."""

    #: "python": a pickled cell or function (payload.pkl in the job dir); "command": argv;
    #: "session": warm ranks (``command`` is their loop) that run cells the kernel sends.
    kind: Literal["python", "command", "session"]
    nproc_per_node: int = 1
    nnodes: int = 1
    #: "local": ranks on this machine; "ray": one node agent per node of a Ray cluster.
    backend: Backend = "local"
    #: The Ray cluster (None: RAY_ADDRESS, else "auto").
    ray_address: str | None = None
    max_retries: int = 0
    timeout: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    output_ranks: OutputRanks = "all"
    background: bool = False
    command: list[str] = field(default_factory=list)
    working_dir: str | None = None
    #: MLflow: resolved in the kernel (experiment id and the first attempt's run id), or
    #: named only (``air run``), then made by the supervisor, which records the id.
    tracking_uri: str | None = None
    experiment_id: str | None = None
    experiment_name: str | None = None
    artifact_location: str | None = None
    run_name: str | None = None
    parent_run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    #: Names brought back from rank 0 into the notebook.
    outputs: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Workload:
        data: dict[str, Any] = json.loads(text)
        return cls(**data)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes
