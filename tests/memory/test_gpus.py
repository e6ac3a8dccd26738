from __future__ import annotations

import pytest

from phaseprof.errors import PhaseprofError
from phaseprof.memory.defaults import GIB
from phaseprof.memory.gpus import KNOWN_GPUS, lookup_gpu


@pytest.mark.parametrize(("name", "gb"), [("H100", 80), ("h100-sxm", 80), ("H200", 141), ("b200", 180),
                                          ("GB200", 186), ("GB300", 279), ("MI300X", 192), ("a100 80gb", 80),
                                          ("L40S", 48)])
def test_lookup_by_name_or_alias(name, gb):
    g = lookup_gpu(name)
    assert g.memory_gb == gb and g.stated_bytes == gb * GIB


def test_measured_totals_are_below_stated_and_say_where_they_come_from():
    for g in KNOWN_GPUS:
        if g.visible_bytes is not None:
            assert g.visible_bytes < g.stated_bytes and g.visible_source
    assert round(lookup_gpu("H100").total_bytes / GIB, 2) == 79.18


def test_unknown_gpu_lists_every_known_name():
    with pytest.raises(PhaseprofError) as e:
        lookup_gpu("TPU-v5")
    assert all(g.name in str(e.value) for g in KNOWN_GPUS)
