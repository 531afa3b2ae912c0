"""The graph GRU cell shared by the recurrent examples (``traffic_index_batching.py``,
``dynamic_graph_forecast.py``)."""
import torch
from torch import nn
from torch_geometric.nn import GCNConv

__all__ = ["GraphGRUCell"]


class GraphGRUCell(nn.Module):
    """GRU cell whose update/reset gates and candidate are graph convolutions over
    ``[x, h]`` (the TGCN / DCRNN construction, with GCN in place of diffusion conv)."""

    def __init__(self, in_channels, hidden):
        super().__init__()
        self.gates = GCNConv(in_channels + hidden, 2 * hidden)
        self.candidate = GCNConv(in_channels + hidden, hidden)

    def forward(self, x, h, edge_index, edge_weight):
        zr = torch.sigmoid(self.gates(torch.cat([x, h], -1), edge_index, edge_weight))
        z, r = zr.chunk(2, dim=-1)
        c = torch.tanh(self.candidate(torch.cat([x, r * h], -1), edge_index, edge_weight))
        return z * h + (1 - z) * c
