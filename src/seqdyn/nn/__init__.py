"""Neural-network building blocks shared by mixers and models (DESIGN §7)."""

from seqdyn.nn.conv import ShortConv
from seqdyn.nn.norms import GatedRMSNorm, HeadOutput, RMSNorm

__all__ = ["GatedRMSNorm", "HeadOutput", "RMSNorm", "ShortConv"]
