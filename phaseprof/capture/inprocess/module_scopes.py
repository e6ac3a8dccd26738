"""Record the ``nn.Module`` tree without the Python tracer: one profiler scope per module ``forward`` call.

Global forward hooks (``register_module_forward_pre_hook`` / ``register_module_forward_hook``) open a scope when
a module's ``__call__`` starts and close it when it returns (also when it raises: ``always_call``). The scope is
named exactly as torch's Python tracer (``with_stack=True``) names module frames, ``nn.Module: <Class>_<N>``,
where N numbers the instances of one class (the class object, keyed by identity, named by ``__name__``) in order
of first call within one profiling session; so ``analysis/modules.py`` builds the same tree from either.

The scope is a ``torch._C._profiler._RecordFunctionFast`` (a ``cpu_op`` event; the loader files ``cpu_op`` and
``user_annotation`` events named ``nn.Module: …`` as module scopes, never as work). It costs less than
``torch.profiler.record_function``, which goes through the dispatcher (``record_function`` is the fallback on
torches without it). While ``torch.compiler.is_compiling()`` the hooks do nothing: a graph compiled while they
are installed stays the graph compiled without them.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

MODULE_SCOPE_PREFIX = "nn.Module: "  # what torch's Python tracer writes (trace.tables.MODULE_PREFIX)


def module_scope_name(cls_name: str, instance: int) -> str:
    """``nn.Module: <Class>_<N>``, torch's Python tracer's name for a module frame."""
    return f"{MODULE_SCOPE_PREFIX}{cls_name}_{instance}"


class ModuleScopes:
    """Install the hooks with ``install()`` (or ``with``), remove them with ``remove()``; both idempotent.

    ``calls``: module forward calls recorded; ``instances``: distinct modules seen. Instance numbers restart
    with every ``ModuleScopes`` (one per profiling session, as the Python tracer's).
    """

    def __init__(self) -> None:
        self._names: dict[int, str] = {}  # id(module) -> scope name; modules outlive the session
        self._per_class: dict[type, int] = {}  # class object -> instances numbered so far
        self._local = threading.local()  # open scopes per thread: forward calls nest per thread
        self._handles: list[Any] = []
        self.calls = 0

    @property
    def instances(self) -> int:
        return len(self._names)

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def install(self) -> ModuleScopes:
        if self._handles:
            return self
        import torch  # noqa: PLC0415 - only captures need torch
        from torch.nn.modules.module import (  # noqa: PLC0415
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling  # torch < 2.3
        scope = getattr(torch._C._profiler, "_RecordFunctionFast", None) or torch.profiler.record_function
        names, per_class = self._names, self._per_class

        def pre(module: Any, _args: Any) -> None:
            if compiling():
                return
            key = id(module)
            name = names.get(key)
            if name is None:
                cls = type(module)
                n = per_class.get(cls, 0)
                per_class[cls] = n + 1
                name = names[key] = module_scope_name(cls.__name__, n)
            rf = scope(name)
            rf.__enter__()
            self._stack().append(rf)
            self.calls += 1

        def post(_module: Any, _args: Any, _out: Any) -> None:
            if compiling():
                return
            stack = self._stack()
            if stack:
                stack.pop().__exit__(None, None, None)

        self._handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]
        return self

    def remove(self) -> None:
        """Remove the hooks; scopes still open on this thread (an exception between pre and post) are closed."""
        for h in self._handles:
            h.remove()
        self._handles = []
        stack = self._stack()
        while stack:
            stack.pop().__exit__(None, None, None)

    def __enter__(self) -> ModuleScopes:
        return self.install()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.remove()
