"""PACE and the training-iteration model (layer 1, pure: no network).

A data-parallel iteration is a chain of layers with forward/backward times and gradient
sizes (`profiles/*.yaml`, derived by `architectures.py`); backward releases each layer's
gradient when it is computed; the next forward needs layer i's update before it starts
layer i. `schedule.simulate` runs that iteration under a communication scheduler:
Horovod-like FIFO with a fusion buffer, or PACE (Bao et al., INFOCOM'20: tensors cut into
chunks, the most urgent ready chunk first, preempting less urgent ones; small tensors fused
by a dynamic program, `fusion.py`). `timeline.py` draws the result and writes it as a
Chrome trace-event JSON.
"""
