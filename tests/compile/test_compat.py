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
