"""The science layer's models: the particle-model protocol (:mod:`~mfattn.models.particles`) and every
model that honours it (attention heads, their fused kernels and sharded form, the two-layer network, the
linear worked example, token particles), with the data and tasks they train on. Never imports
:mod:`mfattn.companion`."""
