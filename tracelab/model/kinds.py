"""Small integer codes stored in the event columns (and in the store)."""

from __future__ import annotations

from enum import IntEnum


class EventKind(IntEnum):
    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    SYNC = 3  # a profiler-recorded synchronization interval (CUPTI sync activity, Kineto cuda_sync)
    RUNTIME = 4  # CUDA / HIP runtime API call on a host thread
    DRIVER = 5  # CUDA driver API call on a host thread
    NVTX_RANGE = 6  # NVTX range, torch record_function / user_annotation (host side)
    NVTX_MARK = 7  # instantaneous NVTX mark (start == end)
    CPU_OP = 8  # PyTorch operator or other CPU-side op
    GPU_ANNOTATION = 9  # user annotation projected on a GPU stream (Kineto gpu_user_annotation)
    OTHER = 10


NO_STREAM = 0xFFFFFFFF  # CUPTI's "not on a stream" (context syncs, event queries) as uint32; parsers map it to -1

GPU_ACTIVITY_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
HOST_API_KINDS = (EventKind.RUNTIME, EventKind.DRIVER)
OS_CALL_CATEGORY = "os_runtime"  # the category of OS runtime calls (nsys OSRT_API) in the timeline (kind OTHER)


class CopyKind(IntEnum):
    UNKNOWN = 0
    HTOD = 1
    DTOH = 2
    DTOD = 3
    HTOH = 4
    PTOP = 5


class MemKind(IntEnum):
    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2
    DEVICE = 3
    ARRAY = 4
    MANAGED = 5


class SyncKind(IntEnum):
    """What a sync event or a host API call waits for (NONE for calls that do not block)."""

    NONE = 0
    STREAM = 1  # cudaStreamSynchronize
    DEVICE = 2  # cudaDeviceSynchronize / cuCtxSynchronize
    EVENT = 3  # cudaEventSynchronize
    STREAM_WAIT_EVENT = 4  # cudaStreamWaitEvent (GPU-side dependency, host does not block)
    MEMCPY = 5  # a synchronous memcpy / memset (cudaMemcpy, .item(), .cpu())
    EVENT_QUERY = 6  # cudaEventQuery / cudaStreamQuery polling


class LaneKind(IntEnum):
    GPU_STREAM = 0
    HOST_THREAD = 1
    NVTX = 2
    GPU_ANNOTATION = 3


class Flag:
    """Bits of the `flags` column."""

    COMM = 1  # a communication kernel (NCCL / RCCL collective or send/recv)
    ORPHAN = 2  # a GPU event whose correlation id matches no host launch
    PDL = 4  # launched with programmatic stream serialization (Programmatic Dependent Launch)
    GRAPH = 8  # launched as part of a CUDA graph
    BLOCKING = 16  # a host API call that blocks the thread until GPU work completes
    LAUNCH = 32  # a host API call that launches GPU work (kernel launch, async memcpy, graph launch)
