"""Finding, reading, validating and overriding ``[tool.attncheck]``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attncheck.config import (
    ConfigError,
    DynamicOptions,
    Settings,
    load,
    parse_codes,
    with_overrides,
)
from attncheck.projects import Projects


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_full_table_is_read(tmp_path):
    config = write(tmp_path / "pyproject.toml", """
[tool.attncheck]
select = ["ATT2", "att301"]
ignore = ["ATT204"]
exclude = ["third_party/"]
per-file-ignores = {"tests/*.py" = ["ATT3"]}
timeout = 5
device = "cpu"
[tool.attncheck.targets.MyAttention]
init = {d_model = 64, n_heads = 4}
""")
    write(tmp_path / "model.py", "class MyAttention:\n    pass\n")  # a declaration must name a class that exists
    settings = load(config)
    assert settings.select == ("ATT2", "ATT301")
    assert settings.ignore == ("ATT204",)
    assert settings.exclude == ("third_party/",)
    assert settings.per_file_ignores == (("tests/*.py", ("ATT3",)),)
    assert (settings.timeout, settings.device) == (5.0, "cpu")
    assert settings.root == tmp_path.resolve()
    options = settings.dynamic_options(jobs=3)
    assert options == DynamicOptions(timeout=5.0, device="cpu", jobs=3,
                                     targets={"MyAttention": {"init": {"d_model": 64, "n_heads": 4}}})


@pytest.mark.parametrize(("table", "message"), [
    ("selct = ['ATT2']", "unknown key 'selct'"),
    ("select = ['ATT999']", "unknown code or prefix 'ATT999'"),
    ("ignore = 'XYZ'", "unknown code or prefix 'XYZ'"),
    ("select = [1]", "select must be a list of strings"),
    ("timeout = -1", "timeout: must be a positive number"),
    ("timeout = true", "timeout: must be a positive number"),
    ("device = 'tpu'", "device: must be one of cpu, cuda, auto"),
    ("per-file-ignores = ['x']", "per-file-ignores must be a table"),
    ("per-file-ignores = {'a.py' = ['NOPE']}", "unknown code or prefix 'NOPE'"),
    ("targets = {A = 1}", "targets must be a table of tables"),
    ("select = [", "invalid TOML"),
])
def test_bad_configuration_is_one_clear_error(tmp_path, table, message):
    config = write(tmp_path / "pyproject.toml", f"[tool.attncheck]\n{table}\n")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load(config)


def _nearest(path: Path) -> Settings:
    """The settings a fresh run gives ``path`` (a new ``Projects``: it remembers each folder's answer)."""
    return Projects(None, {"select": (), "ignore": (), "timeout": None, "device": None}).settings_for(path)


def test_nearest_config_wins_and_pyproject_without_table_is_passed_over(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.attncheck]\nselect = ['ATT1']\n")
    write(tmp_path / "pkg" / "pyproject.toml", "[project]\nname = 'x'\n")
    module = write(tmp_path / "pkg" / "sub" / "m.py", "x = 1\n")
    assert _nearest(module).config_file == tmp_path / "pyproject.toml"
    write(tmp_path / "pkg" / "attncheck.toml", "select = ['ATT3']\n")
    found = _nearest(module)
    assert found.config_file == tmp_path / "pkg" / "attncheck.toml"
    assert found.select == ("ATT3",)


def test_no_config_means_defaults():
    settings = load(None)
    assert settings.select == ("ALL",) and settings.enabled("ATT201")


def test_command_line_overrides_the_file_key_by_key(tmp_path):
    config = write(tmp_path / "attncheck.toml", "select = ['ATT1']\nignore = ['ATT101']\ntimeout = 9\n")
    settings = load(config)
    merged = with_overrides(settings, select=["ATT2,ATT3"], ignore=[], timeout=None, device="cuda")
    assert merged.select == ("ATT2", "ATT3")
    assert merged.ignore == ("ATT101",)
    assert (merged.timeout, merged.device) == (9.0, "cuda")
    with pytest.raises(ConfigError, match="--select: unknown code"):
        with_overrides(settings, select=["ATT8"], ignore=[], timeout=None, device=None)


def test_most_specific_selector_wins():
    settings = Settings(select=("ATT2",), ignore=("ATT201",))
    assert settings.enabled("ATT202") and not settings.enabled("ATT201") and not settings.enabled("ATT301")
    narrow = Settings(select=("ATT201",), ignore=("ATT2",))
    assert narrow.enabled("ATT201") and not narrow.enabled("ATT202")
    assert not Settings(select=("ALL",), ignore=("ALL",)).enabled("ATT101")


def test_per_file_ignores_match_relative_to_the_config(tmp_path):
    settings = Settings(root=tmp_path, per_file_ignores=(("tests/**", ("ATT2",)), ("*.ipynb", ("ATT301",))))
    assert settings.ignored_for(str(tmp_path / "tests" / "deep" / "t.py")) == ("ATT2",)
    assert settings.ignored_for(str(tmp_path / "nb" / "a.ipynb")) == ("ATT301",)
    assert settings.ignored_for(str(tmp_path / "src" / "m.py")) == ()


def test_parse_codes_accepts_prefixes_all_and_commas():
    assert parse_codes(["att2, ATT301", "ALL"], "x") == ("ATT2", "ATT301", "ALL")


def test_timeouts_are_capped_in_files_and_on_the_command_line(tmp_path):
    """Issue 17 item 3: a configuration next to a submission cannot hold a grader for 1000 s."""
    (tmp_path / "attncheck.toml").write_text("timeout = 1000\n")
    with pytest.raises(ConfigError, match="must be at most 300 seconds"):
        load(tmp_path / "attncheck.toml")
    with pytest.raises(ConfigError, match="--timeout: must be at most"):
        with_overrides(Settings(), select=(), ignore=(), timeout=301, device=None)


@pytest.mark.parametrize(("declaration", "message"), [
    ("init = {d_model = 64}\nforwrd = ['x']", "[tool.attncheck.targets.Attn] unknown key 'forwrd'"),
    ("init = 64", "init must be a table"),
    ("forward = 'x'", "forward must be a list of roles"),
    ("forward = ['query', 'keys', 'value']", "forward: unknown role 'keys'"),
    ("mask = 'kept'", "mask must be one of 'keep', 'blocked', 'additive', got 'kept'"),
    ("causal = 'yes'", "causal must be true or false"),
    ("heads = '4'", "heads must be a positive integer, got '4'"),
    ("heads = 0", "heads must be a positive integer"),
    ("d_model = 64\nheads = 5", "d_model = 64 is not a multiple of heads = 5"),
    ("kv_heads = 0", "kv_heads must be a positive integer, got 0"),
    ("heads = 4\nkv_heads = 3", "heads = 4 is not a multiple of kv_heads = 3"),
    ("init = {num_kv_heads = 1}\nkv_heads = 2", "kv_heads = 2 but init sets num_kv_heads = 1"),
    ("rope = 'rotate_half'", "rope must be one of 'half', 'interleaved', got 'rotate_half'"),
    ("rope_base = 0.5", "rope_base must be a number above 1"),
])
def test_every_declaration_key_and_value_is_validated(tmp_path, declaration, message):
    write(tmp_path / "model.py", "class Attn:\n    pass\n")
    config = write(tmp_path / "pyproject.toml", f"[tool.attncheck.targets.Attn]\n{declaration}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(config)


def test_a_declaration_for_a_class_that_does_not_exist_is_an_error(tmp_path):
    write(tmp_path / "src" / "model.py", "class Attention:\n    pass\n\ndef attend(q, k, v):\n    pass\n")
    config = write(tmp_path / "pyproject.toml", "[tool.attncheck.targets.Attention]\ncausal = true\n"
                   "[tool.attncheck.targets.attend]\ncausal = true\n")
    assert set(load(config).targets) == {"Attention", "attend"}
    config.write_text("[tool.attncheck.targets.Atention]\ncausal = true\n")
    with pytest.raises(ConfigError, match=r"targets.Atention\] declares a class or function that is not defined"):
        load(config)


def test_select_accepts_rule_names_and_refuses_an_empty_selection():
    settings = with_overrides(Settings(), select=["wrong-scale,ATT3"], ignore=["sqrt-of-number"], timeout=None,
                              device=None)
    assert settings.select == ("ATT201", "ATT3") and settings.ignore == ("ATT204",)
    for empty in ([""], [" , "]):
        with pytest.raises(ConfigError, match="--select: no code given, which would turn every check off"):
            with_overrides(Settings(), select=empty, ignore=[], timeout=None, device=None)
