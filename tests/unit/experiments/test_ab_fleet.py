"""Simulator arms that name a fleet (``experiments.ab.fleet``): ``replicas=N``, ``router=POLICY``."""

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.arms import Arm, sim_arm_config
from kvreplay.experiments.ab.fleet import arm_fleet
from kvreplay.sim.config import SimConfig


def test_fleet_keys_name_the_fleet_and_leave_the_config_alone():
    assert arm_fleet("replicas=3,router=prefix_affinity,device_blocks=64", "a") == (3, "prefix_affinity")
    assert arm_fleet("replicas=2", "a") == (2, "round_robin")
    assert arm_fleet("router=random", "a") == (1, "random")
    assert arm_fleet("device_blocks=64", "a") is None
    cfg = sim_arm_config(SimConfig(), Arm("a", "sim:replicas=2,router=round_robin,device_blocks=64"))
    assert cfg.device_blocks == 64 and cfg.build == "sim-1+a"


@pytest.mark.parametrize("spec", ["replicas=0", "replicas=two", "router=cache_aware"])
def test_bad_fleet_keys_are_refused(spec):
    with pytest.raises(ConfigError):
        arm_fleet(spec, "a")
