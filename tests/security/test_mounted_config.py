"""Where the deployment's appliance.yaml is mounted (the chart and compose: /etc/medhelm/appliance.yaml, read-only),
it alone is the configuration. The insider sets the CLI's environment: `MEDHELM_CONFIG=mine.yaml`, a copy whose
allowlist also named their own server and a model on it, ran a benchmark there, every prompt sent to a host the
appliance's allowlist refuses; with the variable unset, the home's own appliance.yaml (which they can write) was
read instead of the mount."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.home import Home, ModelEndpoint, layout
from medhelm_local.home.config import ApplianceConfig, dump_config
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.conftest import hospice_csv
from tests.compliance.inproc import InProcessCli


def test_a_configuration_of_the_insiders_own_is_refused_where_the_appliances_is_mounted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(layout.CONFIG_ENV, raising=False)
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    site = Home(cli.home).config.model_dump()
    site["allowlist"] = ["https://*.svc.cluster.local"]  # the site's model servers; nothing on loopback
    mounted = tmp_path / "etc-medhelm" / "appliance.yaml"
    mounted.parent.mkdir()
    mounted.write_text(dump_config(ApplianceConfig.model_validate(site)))
    monkeypatch.setattr(layout, "APPLIANCE_CONFIG", mounted)
    monkeypatch.setenv(layout.CONFIG_ENV, str(mounted))
    assert cli("datasets", "register", "hospice_referral", str(hospice_csv(tmp_path / "notes.csv", 12))).code == 0

    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        mine = ApplianceConfig.model_validate({
            **site, "allowlist": [*site["allowlist"], server.base_url],
            "models": [ModelEndpoint(name="mine", base_urls=[server.base_url]).model_dump()]})
        copy = tmp_path / "mine.yaml"
        copy.write_text(dump_config(mine))
        monkeypatch.setenv(layout.CONFIG_ENV, str(copy))
        named = cli("run", "--model", "mine", "--benchmarks", "hospice_referral")
        assert named.code == 2, named.stderr
        assert str(mounted) in named.stderr and layout.CONFIG_ENV in named.stderr

        monkeypatch.delenv(layout.CONFIG_ENV)
        (cli.home / "appliance.yaml").write_text(dump_config(mine))  # the home is the insider's to write
        unset = cli("run", "--model", "mine", "--benchmarks", "hospice_referral")
        assert unset.code == 2 and "mine" in unset.stderr, unset.stderr
        assert server.stats()["requests_seen"] == 0

    monkeypatch.setenv(layout.CONFIG_ENV, str(mounted))  # the deployment's own variable names the mount: as before
    assert cli("models", "list", "--json").code == 0
