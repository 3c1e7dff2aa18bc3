"""GoRL's stages together: the pipeline (``stages``), the decoder's data and fit (``distill``), and
the callbacks that keep each stage's best encoder and one TensorBoard run over all stages
(``callbacks``)."""

from genpol.pipelines.gorl.stages import train_gorl

__all__ = ["train_gorl"]
