"""The numbered results a verdict may cite: the paper's (:data:`RESULTS`), the companion texts'
(:data:`COMPANION`) and those a chapter of this book derives (:data:`BEYOND`). A verdict's ``ref``
names one of them (:data:`KNOWN`); :func:`mfattn.companion.render.report` refuses any other, and
:mod:`mfattn.companion.evidence` lays them out as the evidence map. To add a result, add its row here.
"""

from __future__ import annotations

__all__ = ["RESULTS", "COMPANION", "BEYOND", "KNOWN"]

# (name as verdicts cite it, what it says in a few words, why it has no verdict when none names it
#  [, a note shown beside its verdicts])
RESULTS = [
    ("Lemma 2.1", "the softmax is $\\tfrac12$-Lipschitz", ""),
    ("Assumption 3.1", "the learning-rate profile $\\zeta$ is bounded, Lipschitz, with a divergent integral",
     "an assumption on the user's choice, met by construction: chapter 02 uses $\\zeta=1$, chapter 04 a constant and a "
     "decaying profile, both bounded, Lipschitz and with a divergent integral"),
    ("Prop. 3.4", "attention features are smooth, with polynomial constants, on balls", ""),
    ("Assumption 3.2", "every measure is supported in one compact $K$ (smoothness on invariant compact sets)",
     "no experiment yet"),
    ("Remark 3.3", "compactness of the trajectories is what the finite-time and the long-time results need",
     "qualitative: it says which hypothesis each result needs; chapter 02 measures Assumption 3.2 on the heads "
     "and chapter 04 the support radius along the flow"),
    ("Remark 3.5", "$C_m$ depends on $L$ and on norm bounds only: no separate dependence on $d_x$ or $d_v$",
     "no experiment yet; chapter 01 measures the growth of the constants, which is what the remark is about"),
    ("Thm 4.1", "$\\inf\\mathcal E_N-\\inf\\mathcal E\\le C/\\sqrt N$ (14)", ""),
    ("Remark 4.2", "comparison with the classical (square-loss) mean-field rate", ""),
    ("Thm 4.3", "a measure is optimal iff its support minimises $\\Phi$ over $K$ (16)", ""),
    ("Definition 5.1", "weak solutions of the continuity equation (20)",
     "a definition: chapter 02's reference flow solves (20) through its characteristics (21), whose law is a weak "
     "solution in this sense"),
    ("Thm 5.2", "SGD heads follow the mean-field flow: $N^{-1/2}$, $\\varepsilon^{1/2}$ and $\\varepsilon$ terms", ""),
    ("Remark 5.3", "the estimate is a propagation-of-chaos statement in Sznitman's spirit, with a nonlinear "
     "cross-entropy residual in the drift",
     "qualitative: a comparison with the literature; chapter 07 sets the heads beside a two-layer network, where "
     "the same coupling is measured"),
    ("Thm 6.1", "energy dissipation $\\mathrm d\\mathcal E/\\mathrm dt=-\\mathcal I$ (38), (39)", ""),
    ("Remark 6.2", "(38) is the energy dissipation equality of a Wasserstein gradient flow",
     "qualitative: an interpretation of Theorem 6.1, whose identity (39) chapter 04 measures"),
    ("Thm 6.3", "stationary solutions have $\\nabla\\Phi=0$ on their support", ""),
    ("Remark 6.4", "stationarity is not optimality",
     "qualitative here, and shown under Thm 4.3: chapter 03 measures stationary measures whose certificate gap is "
     "positive"),
    ("Remark 6.5", "an interior global minimiser that meets the support condition is stationary",
     "a one-line consequence of Theorem 4.3 with differentiability; chapter 03's optimum inside K is stationary "
     "to the solver's accuracy, a check of the solver rather than of the remark"),
    ("Thm 6.6 hyp.", "the trajectory is precompact in $W_1$ (the hypothesis of Theorem 6.6)", "no experiment yet"),
    ("Thm 6.6.1", "$\\mathcal E(\\rho_t)$ converges", ""),
    ("Thm 6.6.2", "$\\mathcal I(\\rho_t)\\to0$", ""),
    ("Thm 6.6.3", "every $W_1$ limit point is stationary",
     "cannot be tested on a finite horizon: a run up to $T$ has no sequences $t_n\\to\\infty$; chapter 04, "
     "'What a finite horizon cannot test', derives why, and measures the hypothesis (Thm 6.6 hyp.) and item 2 "
     "that the proof uses"),
    ("Thm 6.6.4", "the $\\omega$-limit set is nonempty, compact, connected, stationary",
     "cannot be tested on a finite horizon: every finite set of measures is compact; chapter 04, 'What a finite "
     "horizon cannot test'"),
    ("Thm 6.6.5", "convergence to a single stationary solution when the stationary set is totally disconnected",
     "its hypothesis concerns the limit set itself, which a finite run cannot see, and the checkable route "
     "through the stationary set is closed: every stationary measure with a nonzero atom lies on a continuous "
     "orbit of the head symmetry (chapters 04 and 05)"),
    ("Remark 6.8", "Theorem 6.6 is a LaSalle-type invariance result, weaker than convexity-based convergence",
     "qualitative: a comparison; chapter 04, 'What a finite horizon cannot test', says what of Theorem 6.6 a run "
     "can measure"),
    ("Remark 6.7", "an inward-pointing field on a sphere confines the flow (precompactness)", ""),
    ("Prop. 6.9", "compactly supported trajectories are precompact", "no experiment yet",
     "the conclusion is Prokhorov's theorem and holds for every family supported in K; only the hypothesis "
     "$\\operatorname{supp}\\rho_t\\subset K$ says something about the flow, and that is what the verdict measures (chapter 04)"),
    ("Thm 6.10", "Kurdyka–Łojasiewicz rates for $\\mathcal E(\\rho_t)-\\mathcal E_\\infty$", ""),
    ("Remark 6.11", "sources of KL: a finite-atomic analytic reduction (some $\\theta<1$), a local PL estimate "
     "($\\theta=\\tfrac12$)", "no experiment yet"),
    ("Remark 6.12", "with $\\zeta\\ge\\zeta_-$ the KL rates hold in physical time: algebraic, $t^{-1/(2\\theta-1)}$",
     "no experiment yet"),
    ("Remark 6.13", "comparison with finite-dimensional Łojasiewicz theory",
     "no quantitative statement: the remark says that the paper does not claim the KL inequality; whether it "
     "holds is measured under Thm 6.10 and Remark 6.11 (chapter 04, 'What a finite horizon cannot test')"),
    ("Section 8", "convergence to minimisers: the stationary limit satisfies the support condition", ""),
    ("Section 8 PL", "a PL inequality $\\mathcal I\\ge2\\lambda(\\mathcal E-\\mathcal E_{\\min})$ where the flow goes: exponential rate, global limits",
     ""),
    ("Thm 7.1", "local Wasserstein exponential stability under strong monotonicity (45), (46)", ""),
    ("Remark 7.2", "a checkable sufficient condition for strong monotonicity", "no experiment yet"),
    ("Remark 7.3", "relation to contractivity of Wasserstein gradient flows", "no experiment yet"),
    ("Remark 7.4", "Lions-lift interpretation of strong monotonicity", "no experiment yet"),
    ("Thm 7.5", "Dirac stationarity and local stability under (52)", ""),
    ("Remark 7.6", "Dirac stability is the mean-field analogue of a particle-level Hessian test",
     "qualitative: a comparison; chapter 05 measures the two Hessians $H_0$ and $H_{\\rm tr}$ that the analogy concerns"),
    ("Remark 7.7", "$H_0\\succ0$ is sufficient, not necessary: translations feel $H_{\\rm tr}=H_0+\\mathbb E[J^\\top SJ]$ (59)", ""),
    ("Thm 7.8", "translation instability when $H_{\\rm tr}$ has a negative direction", ""),
    ("Remark 7.9", "Theorem 7.8 is the mean-field analogue of saddle instability",
     "qualitative: a comparison; chapter 05 measures the rates of Theorem 7.8 at a saddle"),
    ("(12)", "$\\Phi$ is the first variation of $\\mathcal E$", ""),
    ("(13)", "$\\nabla\\Phi$, the drift of the flow", ""),
    ("(15)", "the i.i.d. logit error is $O(N^{-1/2})$", ""),
    ("(17)", "the stochastic gradient $G_i$ of one sequence", ""),
    ("(18)", "$G_i$ is unbiased, with variance $O(1/S)$", ""),
    ("(24)", "test-function discrepancy between SGD and the flow", ""),
    ("(23)", "the error profile $\\mathrm{Err}_{N,\\varepsilon,T}(z)$ of Theorem 5.2",
     "its terms are Theorem 5.2's: chapter 02's verdicts under Thm 5.2 measure its $N^{-1/2}$, $\\varepsilon^{1/2}$ and $\\varepsilon$ terms"),
    ("(25)", "risk discrepancy between SGD and the flow", ""),
    ("(26)", "$\\nabla\\Phi$ is Lipschitz in the head and in the measure's features on $K$",
     "a step of Theorem 5.2's proof, not a result of its own: its constant $C_K$ enters (36), which chapter 02 measures"),
    ("(27)", "one Euler step of the characteristics is exact to $O(\\varepsilon^2)$",
     "a step of Theorem 5.2's proof, not a result of its own: chapter 02's Euler-term verdict measures its global consequence, order $\\varepsilon$"),
    ("(28)", "the one-step recursion for the pathwise error $e_i^k$",
     "a step of Theorem 5.2's proof, not a result of its own: an intermediate inequality whose conclusion (36) chapter 02 measures"),
    ("(29)", "the discrete Grönwall bound that closes (28)",
     "a step of Theorem 5.2's proof, not a result of its own: intermediate, measured through (36) (chapter 02)"),
    ("(30)", "the martingale $M_i^k$ has a sub-Gaussian tail at scale $\\sqrt{\\varepsilon}$",
     "a step of Theorem 5.2's proof, not a result of its own: chapter 02's martingale verdict measures the $\\varepsilon^{1/2}$ term it gives, and its high-probability verdict the tail of the whole error"),
    ("(32)", "the union bound over heads and directions: the $\\sqrt{\\log N}$ and $\\sqrt{d_\\omega}$ terms",
     "a step of Theorem 5.2's proof, not a result of its own: the terms it adds are measured through (36), whose maximum over heads grows slowly with $N$ (chapter 02)"),
    ("(33)", "the feature error splits into the pathwise term and the i.i.d. term $B_k$",
     "a step of Theorem 5.2's proof, not a result of its own: an identity of the triangle inequality; its two terms are measured as (36) (chapter 02) and (15) (chapters 03 and 07)"),
    ("(35)", "the i.i.d. term $B_k$ is $O(N^{-1/2})$ uniformly over the steps",
     "a step of Theorem 5.2's proof, not a result of its own: its rate at a fixed time is (15), measured in chapters 03 and 07"),
    ("(36)", "the pathwise error $e_i$ of the tagged characteristics", ""),
    ("(37)", "the test-function discrepancy of the tagged characteristics themselves is $O(N^{-1/2})$",
     "a step of Theorem 5.2's proof, not a result of its own: the characteristics are i.i.d., so this is the CLT of a mean of test functions, the part of (24) that chapter 02 measures against the reference population"),
    ("(39)", "the integrated energy identity", ""),
    ("(40)", "at a stationary solution $\\nabla\\Phi$ vanishes $\\bar\\rho$-almost surely",
     "the statement of Theorem 6.3, measured under Thm 6.3 (chapter 03's stationary measures)"),
    ("(41)", "the support of a stationary solution lies in the critical set of $\\Phi$ on $K$",
     "the same statement as (40) for the support, measured under Thm 6.3 (chapter 03)"),
    ("(42)", "the time change between learning-rate profiles", ""),
    ("(43)", "the trajectory approaches its $\\omega$-limit set in $W_1$",
     "an infinite-horizon statement (Theorem 6.6's limit-set items): a finite run cannot test it (chapter 04, 'What a finite horizon cannot test')"),
    ("(44)", "the Kurdyka–Łojasiewicz inequality with exponent $\\theta$ and constant $c_{\\rm KL}$",
     "Theorem 6.10's hypothesis: chapter 04 fits $\\theta$ and $c_{\\rm KL}$ on the tail, under Thm 6.10 and Remark 6.11"),
    ("(45)", "strong monotonicity $\\kappa$", ""),
    ("(46)", "the Grönwall bound on $W_2$ under (45)", ""),
    ("(47)", "strong monotonicity of the lifted gradient $D\\tilde{\\mathcal E}(W)=\\nabla\\Phi(W;\\mathcal L(W))$", ""),
    ("(48)", "the lifted risk\'s second derivative is at least $\\kappa\\,\\mathbb E\\lVert W_\\delta\\rVert^2$", ""),
    ("(49)", "the second derivative of the lifted risk: particle term plus interaction term", ""),
    ("(50)", "$H_0$, the Hessian of $\\Phi$ at a Dirac stationary point", ""),
    ("(51)", "Dirac stationarity", ""),
    ("(52)", "$H_0$ positive definite (Theorem 7.5\'s hypothesis)", ""),
    ("(53)", "Theorem 7.5\'s $W_2$ contraction rate under (52)",
     "no case to test: (52) fails at every Dirac stationary point of this model with full-rank blocks (chapter 05, "
     "interlacing), so the contraction it would give has nothing to act on"),
    ("(54)", "under (52), $\\nabla^2\\Phi\\succeq\\tfrac34\\lambda_0 I$ near $\\omega_\\ast$",
     "a step of Theorem 7.5's proof under (52), which fails at every Dirac stationary point of this model (chapter 05), so the step is never reached"),
    ("(55)", "the local term $A(\\rho)$ of the monotonicity quotient is at least $\\tfrac34\\lambda_0M_2(\\rho)$",
     "a step of Theorem 7.5's proof under (52), which fails in this model (chapter 05)"),
    ("(56)", "the interaction term $B(\\rho)$ is at least $-CrM_2(\\rho)$",
     "a step of Theorem 7.5's proof under (52), which fails in this model (chapter 05)"),
    ("(57)", "near $\\delta_{\\omega_\\ast}$ the pairing of $\\omega-\\omega_\\ast$ with $\\nabla\\Phi$ is at least $c_\\ast M_2(\\rho)$",
     "a step of Theorem 7.5's proof under (52), which fails in this model (chapter 05); (45) is measured instead along translations (Thm 7.1)"),
    ("(58)", "$M_2(\\rho_t)$ contracts exponentially: Theorem 7.5's conclusion",
     "no case to test under (52) (chapter 05, interlacing); without it chapter 05 measures the cloud ending farther (under Thm 7.5)"),
    ("(59)", "$H_{\\rm tr}$, the translation Hessian", ""),
    ("(60)", "the optimality condition: the residual's pairing with $\\psi(\\omega')-\\psi(\\omega)$ is nonnegative",
     "a step of the proof of Theorem 4.3; measured through Theorem 4.3's certificate gap (chapter 03)"),
]

# results of the companion texts that chapters test (not listed as results of 2606.10469)
COMPANION = [
    ("alvarezlopez2026perceptrons Thm 3.5", "with a perceptron, descent does not end in a single cluster"),
    ("alvarezlopez2026perceptrons energy", "the token dynamics are gradient flows of the interaction energy"),
    ("alvarezlopez2026perceptrons clustering", "without a perceptron, small $\\beta$ ends in one cluster"),
    ("alvarezlopez2026perceptrons code", "the authors' public simulation code: the cluster counts it reports "
     "(external comparisons of this engine with it, chapter 06)"),
]

# results this book derives beyond the paper (each chapter that derives one states and numbers it)
BEYOND = [
    ("Kinetic limit (8.3)", "heavy ball with momentum $1-\\gamma\\eta$ and learning rate $\\eta^2$ is a damped kinetic "
     "flow (8.1)-(8.2); its energy balance (8.3) (chapter 08)"),
    ("Kinetic chaos", "heavy-ball heads follow their kinetic characteristics at $N^{-1/2}$ (chapter 08)"),
    ("Heavy-ball clock (8.5)", "heavy ball at a fixed momentum $\\mu$ follows the gradient flow at "
     "$\\tau=k\\alpha/(1-\\mu)$, to $O(\\alpha)$ (chapter 08)"),
    ("Adam chaos", "Adam's heads against their characteristics: $N^{-1/2}$ for a Lipschitz rule (large "
     "$\\varepsilon$), sign flips of order $N^{-1/4}$ at a tiny $\\varepsilon$ (8.8) (chapter 08)"),
    ("Adam crossover (8.7)", "Adam on the risk's own gradient freezes its heads beyond $N^{*}=x^{*}/\\varepsilon$ "
     "(chapter 08)"),
    ("Chaos on text", "heads trained by gradient descent on English text follow their characteristics at $N^{-1/2}$ "
     "over a short horizon; over a longer one the trained measure's tail grows heavy and the rate flattens "
     "(chapter 09)"),
    ("Risk gap on text (9.1)", "the mean risk gap to the large-$N$ limit at a fixed horizon falls like $1/N$, the "
     "weak-error expansion (9.1), on training and on held-out text (chapter 09)"),
    ("Coordinate check (9.3)", "under the mean-field scaling a head's gradient, its displacement and the logits are "
     "flat in $N$; under the standard parametrisation (9.2) a head moves like $N^{-1/2}$ (chapter 09)"),
]

KNOWN = {name for name, *_ in RESULTS} | {name for name, _ in COMPANION} | {name for name, _ in BEYOND}
