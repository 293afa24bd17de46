"""accel._compat answers for keys and functions the running torch may lack."""

import pytest

from accel import _compat

pytestmark = pytest.mark.cpu


def test_inductor_config_has_answers_false_for_missing_keys():
    assert _compat.inductor_config_has("max_autotune") is True
    assert _compat.inductor_config_has("rocm.no_such_key_in_any_torch") is False
    assert _compat.inductor_config_has("no_such_section.key") is False


def test_inductor_config_get_raises_or_defaults():
    with pytest.raises(KeyError):
        _compat.inductor_config_get("no_such_key_in_any_torch")
    assert _compat.inductor_config_get("no_such_key_in_any_torch", 7) == 7


def test_dtensor_class_is_resolved_once_and_forgotten_by_clear_cache():
    import torch
    import accel
    from accel import _caches

    found = _compat.dtensor_class()
    if torch.distributed.is_available():
        from torch.distributed.tensor import DTensor

        assert found is DTensor
    else:
        assert found is None
    assert _compat.dtensor_class.cache_info().currsize == 1
    assert _caches.entries()["accel._compat.distributed.dtensor_class"].clear is not None  # a detection cache
    accel.clear_cache()
    assert _compat.dtensor_class.cache_info().currsize == 0
