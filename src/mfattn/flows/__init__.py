"""The science layer's dynamics: one integrator with named steppers (:mod:`~mfattn.flows.integrate`),
finite-head SGD (19) and the reference flow (21) (:mod:`~mfattn.flows.dynamics`), what the limits of
momentum and Adam predict (:mod:`~mfattn.flows.optimizers`), and named random
streams (:mod:`~mfattn.flows.seeds`). Never imports :mod:`mfattn.companion`."""
