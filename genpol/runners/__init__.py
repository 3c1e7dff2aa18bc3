"""Training loops: on-policy (collect, advantages, update), off-policy (act, store, updates from
replay), offline RL and behaviour cloning, all on one run scaffold (resume, callbacks, evaluation,
checkpoints, summary). The pipelines that chain them into a run are in ``genpol.pipelines``."""
