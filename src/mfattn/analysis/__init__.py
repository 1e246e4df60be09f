"""The science layer's analyses: the static approximation (section 4), long-time fits (section 6),
Dirac stability (section 7), smoothness constants, least-squares fits, optimal transport and the cluster
experiments on token systems (chapter 06). Never
imports :mod:`mfattn.companion`."""
