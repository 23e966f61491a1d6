"""hydra/sweeper=popfair: the basic sweeper, composing each case once (the validation pass hands its
composed configs to the launcher) and parsing each config file once per process."""

from __future__ import annotations

import importlib
import pickle
from types import ModuleType

import pytest
from hydra.core.plugins import Plugins
from omegaconf import DictConfig, OmegaConf

from popfair.runtime import hydra_loader


@pytest.fixture
def plugin() -> ModuleType:
    """The plugin module as Hydra runs it: Hydra's plugin scan (once per process) re-executes the
    modules of hydra_plugins and its own core plugins, so the classes are imported after it."""
    Plugins.instance()
    return importlib.import_module("hydra_plugins.popfair_sweeper.popfair_sweeper")


class CountingLoader:
    def __init__(self) -> None:
        self.composed: list[tuple[str, ...]] = []

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        self.composed.append(tuple(sweep_overrides))
        return OmegaConf.create({"overrides": list(sweep_overrides)})


def test_validation_composes_each_case_and_the_launcher_takes_it_without_composing_again(plugin, monkeypatch):
    import popfair.sweep.doctor

    checked = []  # the pre-flight checks get every composed case (their own tests: test_doctor.py)
    monkeypatch.setattr(popfair.sweep.doctor, "before_sweep", lambda master, configs, first: checked.append(configs))
    counting = CountingLoader()
    sweeper = plugin.PopfairSweeper(max_batch_size=None)
    sweeper.compose_once = plugin.ComposeOnceLoader(counting)
    sweeper.config = OmegaConf.create()
    batch = [["a=1", "b=x"], ["a=2", "b=x"]]
    sweeper.validate_batch_is_legal(batch)
    assert counting.composed == [("a=1", "b=x"), ("a=2", "b=x")]  # every case composed before any runs
    assert [[c.overrides for c in configs] for configs in checked] == [batch]
    for overrides in batch:  # what the launcher asks for
        assert sweeper.compose_once.load_sweep_config(sweeper.config, overrides).overrides == overrides
    assert len(counting.composed) == 2  # not composed again
    sweeper.compose_once.load_sweep_config(sweeper.config, ["a=1", "b=x"])  # asked again: composed afresh
    assert len(counting.composed) == 3


def test_a_launcher_pickled_to_workers_carries_no_composed_configs(plugin):
    loader = plugin.ComposeOnceLoader(CountingLoader())
    loader.compose(OmegaConf.create(), ["a=1"])
    assert loader.composed
    assert pickle.loads(pickle.dumps(loader)).composed == {}


class FailingLoader(CountingLoader):
    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        if "a=bad" in sweep_overrides:
            raise ValueError("Could not override 'a'. No match in the defaults list.")
        return super().load_sweep_config(master_config, sweep_overrides)


class WaitingLoader(CountingLoader):
    """The sweep's process composes its second case (the first is composed before the worker is forked)
    only once the forked worker has composed one: on a loaded machine the worker can start after this
    process took every case, which is correct but leaves the worker's half untested."""

    def __init__(self) -> None:
        import multiprocessing
        import os

        super().__init__()
        self.parent, self.worker_composed = os.getpid(), multiprocessing.get_context("fork").Event()

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        import os

        if os.getpid() != self.parent:
            self.worker_composed.set()
        elif len(self.composed) == 1:
            assert self.worker_composed.wait(120), "the forked worker composed no case"
        return super().load_sweep_config(master_config, sweep_overrides)


def test_a_large_batch_is_composed_on_two_cores_in_order(plugin, monkeypatch):
    from popfair.runtime import parallel

    monkeypatch.setattr(parallel, "cpu_count", lambda: 2)
    counting = WaitingLoader()
    loader = plugin.ComposeOnceLoader(counting)
    batch = [[f"a={i}", "b=x"] for i in range(plugin.FORKED_BATCH + 3)]
    loader.compose_all(OmegaConf.create(), batch)
    assert list(loader.composed) == [tuple(overrides) for overrides in batch]
    assert [config.overrides for config in loader.composed.values()] == batch
    assert 1 <= len(counting.composed) < len(batch)  # the rest was composed in the worker, which took them


def test_a_case_the_worker_cannot_compose_fails_with_hydras_error(plugin, monkeypatch):
    from popfair.runtime import parallel

    monkeypatch.setattr(parallel, "cpu_count", lambda: 2)
    loader = plugin.ComposeOnceLoader(FailingLoader())
    batch = [[f"a={i}"] for i in range(plugin.FORKED_BATCH)] + [["a=bad"], ["a=last"]]
    with pytest.raises(ValueError, match="Could not override 'a'"):
        loader.compose_all(OmegaConf.create(), batch)


def _same_tree(a, b, path: str = "") -> None:
    """Two configs alike node by node: node types, flags, container types and every value, and each
    node's parent the container that holds it (the merge re-links parents once per case)."""
    from omegaconf.basecontainer import BaseContainer

    assert type(a) is type(b), path
    assert (a._get_parent() is None) == (b._get_parent() is None), path
    assert a._metadata.flags == b._metadata.flags, path
    assert a._metadata.ref_type == b._metadata.ref_type, path
    if not isinstance(a, BaseContainer):
        assert a._value() == b._value(), path
        return
    assert (a._metadata.object_type, a._metadata.key_type, a._metadata.element_type) == (
        b._metadata.object_type,
        b._metadata.key_type,
        b._metadata.element_type,
    ), path
    assert (a._is_none(), a._is_missing()) == (b._is_none(), b._is_missing()), path
    if a._is_none() or a._is_missing():
        return
    keys = list(a.keys()) if isinstance(a, DictConfig) else list(range(len(a)))
    assert keys == (list(b.keys()) if isinstance(b, DictConfig) else list(range(len(b)))), path
    for key in keys:
        assert a._get_node(key)._get_parent() is a and b._get_node(key)._get_parent() is b, f"{path}.{key}"
        _same_tree(a._get_node(key), b._get_node(key), f"{path}.{key}")


def test_the_memo_loader_composes_what_hydras_loader_composes(monkeypatch):
    """Hydra's own configs and the primary config merged once, each case's groups merged onto a copy,
    parsed configs shared and copied only where Hydra takes their nodes as they are, a config placed
    under its package copied once and unpickled for each case, the map of known choices built only for
    interpolated defaults: every case of a sweep composes to the same config, node for node, as
    Hydra's loader composes it (a shared parsed config changed by one case would show in the next),
    and a bad override fails with Hydra's error."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode

    from tests.conftest import CONF_DIR

    search_path = create_config_search_path(CONF_DIR)
    hydras = ConfigLoaderImpl(config_search_path=search_path)
    ours = ConfigLoaderImpl(config_search_path=search_path)
    ours.repository = hydra_loader.MemoConfigRepository(config_search_path=search_path, share=True)
    ours.__class__ = hydra_loader.MemoConfigLoader
    master = hydras.load_configuration("config", ["experiment=popresume_grid", "dry_run=true"], RunMode.MULTIRUN)
    monkeypatch.setattr(
        hydra_loader.hydra_defaults_list, "_create_interpolation_map", hydra_loader._interpolation_map_if_needed
    )
    cases = [
        ["format_model=text-gpt4o_mini", "occupation=nurse", "protected_attr=gender", "experiment=popresume_grid"],
        ["format_model=image_photo-gpt4o", "occupation=teacher", "protected_attr=race", "experiment=popresume_grid"],
        ["format_model=text-gpt4o_mini", "protected_attr=race", "population.n=50", "experiment=popresume_grid"],
        ["panel_cell=gender-glm51", "experiment=callback_panel"],
    ]
    for overrides in cases + cases[:2]:  # the second time round, every group config from the memo
        monkeypatch.setattr(
            hydra_loader.hydra_defaults_list, "_create_interpolation_map", hydra_loader._INTERPOLATION_MAP
        )
        expected = hydras.load_sweep_config(master, overrides)
        monkeypatch.setattr(
            hydra_loader.hydra_defaults_list, "_create_interpolation_map", hydra_loader._interpolation_map_if_needed
        )
        composed = ours.load_sweep_config(master, overrides)
        _same_tree(expected, composed)
        assert OmegaConf.to_yaml(expected) == OmegaConf.to_yaml(composed)
    assert len(hydra_loader._MERGED) >= 1  # the shared start was merged once and reused
    assert hydra_loader._EMBEDDED  # group configs placed under their package were copied once
    with pytest.raises(ConfigCompositionException) as hydras_error:
        hydras.load_sweep_config(master, ["occupation=no_such_occupation"])
    with pytest.raises(ConfigCompositionException) as our_error:
        ours.load_sweep_config(master, ["occupation=no_such_occupation"])
    assert str(our_error.value) == str(hydras_error.value)


@pytest.mark.parametrize(
    "overrides, mode, added",
    [
        (["population.n=300", "estimator=outcome_gap"], "RUN", True),  # `python -m popfair ...`
        (["occupation=nurse,teacher"], "MULTIRUN", True),  # `-m`: Hydra adds hydra.mode=MULTIRUN
        (["experiment=popresume_grid_offline"], "MULTIRUN", False),  # a preset whose config sets the mode
        (["occupation=nurse,teacher"], "RUN", True),  # a sweep without -m: Hydra's error
    ],
)
def test_the_mode_check_and_the_run_are_one_composition_of_what_hydra_composes(overrides, mode, added):
    """`Hydra.get_mode` composes the config (as for a sweep, overrides not checked) only to read
    hydra.mode; the run or sweep that follows, from the same overrides plus Hydra's `hydra.mode=...`,
    gets that config itself, with the mode override applied and recorded: the same config, node for
    node, as Hydra's loader composes for it, and the same error for a sweep run without -m."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode

    from tests.conftest import CONF_DIR

    search_path = create_config_search_path(CONF_DIR)
    hydras = ConfigLoaderImpl(config_search_path=search_path)
    ours = hydra_loader.PopfairConfigLoader(config_search_path=search_path)
    checked = ours.load_configuration("config", list(overrides), RunMode.MULTIRUN, validate_sweep_overrides=False)
    then = [*overrides, f"hydra.mode={mode}"] if added else list(overrides)
    if mode == "RUN" and any("," in o for o in overrides):
        with pytest.raises(ConfigCompositionException) as hydras_error:
            hydras.load_configuration("config", then, RunMode.RUN)
        with pytest.raises(ConfigCompositionException) as our_error:
            ours.load_configuration("config", then, RunMode.RUN)
        assert str(our_error.value) == str(hydras_error.value)
        return
    expected = hydras.load_configuration("config", then, RunMode[mode])
    composed = ours.load_configuration("config", then, RunMode[mode])
    assert composed is checked  # composed once
    _same_tree(expected, composed)
    assert OmegaConf.to_yaml(expected) == OmegaConf.to_yaml(composed)
    # handed on once: the next composition is a composition
    assert ours.load_configuration("config", then, RunMode[mode]) is not composed


def test_a_skipped_missing_default_is_composed_again_and_fails_as_hydra_fails(tmp_path):
    """A group default left `???` is skipped by the mode check and an error for a run: the run composes
    again, and says what Hydra says."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from hydra.types import RunMode

    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "mysql.yaml").write_text("port: 3306\n")
    (tmp_path / "config.yaml").write_text("defaults:\n  - db: ???\n  - _self_\nx: 1\n")
    search_path = create_config_search_path(str(tmp_path))
    ours = hydra_loader.PopfairConfigLoader(config_search_path=search_path)
    checked = ours.load_configuration("config", [], RunMode.MULTIRUN, validate_sweep_overrides=False)
    assert checked.x == 1
    errors = (ConfigCompositionException, MissingConfigException)
    with pytest.raises(errors) as hydras_error:
        ConfigLoaderImpl(config_search_path=search_path).load_configuration("config", ["hydra.mode=RUN"], RunMode.RUN)
    with pytest.raises(errors) as our_error:
        ours.load_configuration("config", ["hydra.mode=RUN"], RunMode.RUN)
    assert str(our_error.value) == str(hydras_error.value)
    # and a file edited meanwhile is read again (the parsed files are kept by modification time)
    (tmp_path / "config.yaml").write_text("defaults:\n  - db: mysql\n  - _self_\nx: 22\n")
    assert ours.load_configuration("config", ["hydra.mode=RUN"], RunMode.RUN).x == 22


@pytest.mark.parametrize(
    "overrides, imported, not_imported",
    [
        ([], ["popfair.case.population", "statsmodels.stats.power", "scipy.stats"], []),
        (["population=paired"], ["popfair.case.population"], ["statsmodels.stats.power", "scipy.stats"]),
        (["plan.enabled=false"], ["popfair.case.population"], ["statsmodels.stats.power"]),
    ],
)
def test_warm_up_imports_what_the_first_case_plans_with(overrides, imported, not_imported):
    """Beside the composing worker the sweep imports the case's modules and its design's power line
    (a population case's t test: statsmodels and scipy.stats; a paired case's McNemar: neither)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys\n"
        "from tests.conftest import compose_config\n"
        "from popfair.sweep.in_process import warm_up\n"
        f"warm_up(compose_config({overrides!r}))\n"
        f"print([m for m in {imported + not_imported!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == repr(imported)


def test_memoised_interpolation_parsing_resolves_as_omegaconf_does():
    """A sweep parses each distinct interpolation string once (popfair.case.compose.
    memoise_interpolation_parsing): every case resolves to the same values as without the memo,
    nested and string interpolations, resolvers and escapes included, and a malformed
    interpolation still fails as OmegaConf fails."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import os
from omegaconf import OmegaConf
from omegaconf.errors import GrammarParseError
from tests.conftest import compose_config
from popfair.case.compose import memoise_interpolation_parsing, resolved

os.environ["POPFAIR_MEMO_TEST"] = "from-env"
extra = OmegaConf.create({
    "a": 1, "b": "${a}", "c": "x-${b}-${oc.env:POPFAIR_MEMO_TEST}", "d": {"e": "${c}", "f": "\\\\${a}"},
    "g": "${oc.select:missing,fallback}", "h": ["${a}", "${d.e}"],
})
cases = [compose_config(o) for o in ([], ["occupation=teacher", "screener=claude3_haiku"], ["population=paired"])]
before = [resolved(c) for c in cases] + [OmegaConf.to_container(extra, resolve=True)]
memoise_interpolation_parsing()
memoise_interpolation_parsing()  # once is enough; a second call changes nothing
for _ in range(2):
    after = [resolved(c) for c in cases] + [OmegaConf.to_container(extra, resolve=True)]
    assert after == before, "resolved differently"
assert before[-1]["d"]["f"] == "${a}" and before[-1]["c"] == "x-1-from-env"
import omegaconf.base
assert omegaconf.base.parse.cache_info().hits > 0
for _ in range(2):
    try:
        omegaconf.base.parse("${oops")
    except GrammarParseError:
        pass
    else:
        raise AssertionError("a malformed interpolation resolved")
print("ok")
"""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


def test_a_dry_run_sweep_from_the_command_line_composes_with_the_memo_loader(tmp_path):
    """`python -m popfair -m ... dry_run=true`: the loader Hydra creates (PopfairConfigLoader, installed
    before Hydra's plugin scan runs the sweeper's module again) becomes the memo loader, which merges the
    shared start of its cases once."""
    from tests.conftest import popfair_in_process

    hydra_loader._MERGED.clear()
    done = popfair_in_process(
        "-m", "occupation=nurse,teacher", "population.n=60", "estimator=outcome_gap", "dry_run=true", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dry run: 2 cases planned" in done.stdout
    assert len(hydra_loader._MERGED) == 1
