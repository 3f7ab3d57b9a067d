"""The ``workbench.trainers`` plugin ``local``: what ``workbench train`` needs to know of this trainer
without running it — the ``[trainer]`` defaults, the checks of the ``[loss]`` and ``[trainer]`` tables,
and the roles that place the inference server and the trainer process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError, nearest
from workbench.training.roles import TrainRoles

if TYPE_CHECKING:
    from workbench.training.run_config import Trainer


class LocalTrainer:
    name = "local"

    def defaults(self) -> dict[str, Any]:
        from workbench_local.training.trainer_config import TrainerConfig

        return TrainerConfig().to_dict()

    def check(self, tables: dict[str, Any]) -> None:
        """Refuse an unknown loss, a loss option or a trainer option, naming the nearest valid one."""
        from workbench_local.training.losses import LOSSES, build_loss
        from workbench_local.training.trainer_config import TrainerConfig

        loss = dict(tables["loss"])
        name = loss.pop("name", "pg")
        if name not in LOSSES or name == "kl":
            raise ConfigError(f"unknown loss {name!r}{nearest(name, [k for k in LOSSES if k != 'kl'])}; "
                              "choose pg or ce (add a KL term with loss.kl_coef)")
        build_loss(name, **loss)
        TrainerConfig.from_dict(tables["trainer"])

    def roles(self) -> TrainRoles:
        from workbench_local.training.roles import LocalRoles

        return LocalRoles()


TRAINER: Trainer = LocalTrainer()
