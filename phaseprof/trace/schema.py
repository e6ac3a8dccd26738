"""msgspec structs for the parts of a Kineto chrome trace phaseprof reads.

Only the fields we use are declared; msgspec skips everything else without building Python objects for it,
which is why loading is faster and leaner than ``json.loads``/``orjson.loads`` of the whole document.
Types are deliberately loose (``int | str``) where real traces disagree (legacy ``tid: "stream 7"``).
``Event`` and ``Args`` are ``gc=False``: they hold only scalars (and ``Args``), never a cycle, so the cyclic GC
need not track the hundreds of thousands of them a trace decodes to (16 bytes and some time saved on each).
"""

from __future__ import annotations

from typing import Any

import msgspec

Num = int | float


class Args(msgspec.Struct, frozen=True, gc=False):
    correlation: int | str | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    external_id_legacy: int | None = msgspec.field(default=None, name="external id")  # tb_plugin-era traces
    device: int | str | None = None
    stream: int | str | None = None
    bytes: Num | str | None = None  # memcpy (ROCm runtime calls write it as a string) / memset payload
    mem_bytes: Num | None = msgspec.field(default=None, name="Bytes")  # [memory] event: + alloc, - free
    total_allocated: Num | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Num | None = msgspec.field(default=None, name="Total Reserved")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    name: str | None = None  # metadata events: process_name / thread_name
    labels: str | None = None  # metadata events: process_labels ("GPU 0", "CPU")
    kernel: str | None = None  # launch API calls (ROCm, and CUDA under graph capture on some builds): kernel name


class Event(msgspec.Struct, frozen=True, gc=False):
    ph: str = ""
    name: str | int | float | None = ""
    cat: str | None = None
    pid: int | str | None = 0
    tid: int | str | None = 0
    ts: Num | None = None
    dur: Num | None = None
    id: int | str | None = None
    args: Args | None = None


class TraceDoc(msgspec.Struct):
    traceEvents: list[Event] | None = None
    schemaVersion: Any = None
    deviceProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None
    roctracer_version: Any = None
    with_stack: Any = None
    profile_memory: Any = None
    record_shapes: Any = None
    vllm_version: Any = None
    phaseprof: dict[str, Any] | None = None  # capture metadata phaseprof itself embeds
