"""The science layer's analyses: the static approximation (section 4), long-time fits (section 6),
Dirac stability (section 7), smoothness constants, least-squares fits and optimal transport. Never
imports :mod:`mfattn.companion`."""
