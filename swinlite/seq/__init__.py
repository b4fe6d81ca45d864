"""1-D relative attention (Shaw et al., 2018) and a sequence encoder built from it; Swin uses none of this.

:mod:`.attention` holds the layer; :mod:`.skew` and :mod:`.buffered` its two query-block kernels for long
sequences, which share one loop (:func:`.skew.over_query_blocks`); :mod:`.encoder` the encoder.
"""

from .attention import RelPosSelfAttention1d
from .encoder import RelPosSeqEncoder

__all__ = ["RelPosSelfAttention1d", "RelPosSeqEncoder"]
