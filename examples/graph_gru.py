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


if __name__ == "__main__":
    # A self-check of the cell alone (no store, no MPI; every rank runs it on its own):
    # learn to output the previous step's signal on a 6-node ring.
    torch.manual_seed(0)
    ring = torch.arange(6)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % 6]),
                              torch.cat([(ring + 1) % 6, ring])])
    cell, head = GraphGRUCell(1, 8), nn.Linear(8, 1)
    opt = torch.optim.Adam([*cell.parameters(), *head.parameters()], lr=0.05)
    x = torch.randn(8, 6, 1)
    losses = []
    for step in range(15):
        h = torch.zeros(6, 8)
        loss = 0.0
        for t in range(1, len(x)):
            h = cell(x[t], h, edge_index, None)
            loss = loss + ((head(h) - x[t - 1]) ** 2).mean()
        loss = loss / (len(x) - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    print(f"GraphGRUCell: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} steps")
