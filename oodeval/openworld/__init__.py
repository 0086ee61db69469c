"""Open-world evaluation and GMoP (the second half of the OpenworldAUC paper).

Modules (torch is imported only by `gmop`, `clip` and the encoder training in `features`):

- `base_new`: base and new classes, k-shot training sets, resampling a test set to a base:new
  sample ratio (Fwd = base:new 5:1, Bwd = 1:5, as Table 3) and ratio sweeps;
- `ratio_study`: every metric against the base:new ratio (property P3, Figure 2);
- `features`: the frozen-feature file format, a synthetic generator with controllable base/new
  overlap, and real features from a small network trained on the base classes of MNIST/digits;
- `objective`: GMoP's training objective term by term (the paper's lambda, the ranking term's
  weight, the gates of Table 17) and `GMoPConfig`;
- `gmop`: Gated Mixture-of-Prompts (Section 5.1) on frozen features, and its references
  (zero-shot, a single context trained with cross-entropy);
- `clip`: optional open_clip feature extraction and true prompt tuning (``oodeval[clip]``).

The metrics themselves live in `oodeval.measures.openworld`.
"""
