"""A synthetic traffic series for examples and benchmarks (no download): PeMS-like
sensor speeds, generated block by block so that any range of steps can be made on any
rank without the rest."""
import numpy as np

__all__ = ["synthetic_block"]


def synthetic_block(start, stop, nodes, features, seed=0):
    """PeMS-like speeds (daily and weekly congestion, per-sensor level, noise) at 5-minute
    steps ``[start, stop)``, feature 1 = time of day; deterministic per step."""
    t = np.arange(start, stop, dtype=np.float64)[:, None]
    rng = np.random.default_rng([seed, 1])
    level = rng.uniform(55, 70, nodes)[None, :]
    phase = rng.uniform(-0.3, 0.3, nodes)[None, :]
    depth = rng.uniform(5, 30, nodes)[None, :]
    tod = (t % 288) / 288.0
    weekday = ((t // 288) % 7) < 5
    rush = (np.exp(-((tod - 0.33 + phase * 0.05) / 0.04) ** 2)
            + np.exp(-((tod - 0.72 + phase * 0.05) / 0.05) ** 2))
    noise = np.sin(t * 12.9898 + np.arange(nodes)[None, :] * 78.233) * 43758.5453
    noise = (noise - np.floor(noise)) - 0.5
    speed = level - depth * rush * np.where(weekday, 1.0, 0.3) + 4.0 * noise
    out = np.empty((stop - start, nodes, features), dtype=np.float32)
    out[:, :, 0] = speed
    for k in range(1, features):
        out[:, :, k] = tod if k == 1 else speed * 0.01 * k
    return out
