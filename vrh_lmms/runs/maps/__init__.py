"""Attention maps over the image (the paper's Figs A1/A2) and the training-free locator built on them.

Layers, lowest first: `grid` (image tokens -> a 2-D grid of cells, pure), `views` (head sets -> one map, pure),
`locator` (a map -> a box in pixels, pure), `capture` (one teacher-forced forward -> per-head attention over the
image tokens), `collect` (an lmms-eval run over chosen docs -> one `DocMaps` per doc), `figure` (PNG), `evaluate`
(located boxes of head sets -> Acc@0.5 with clustered intervals), `outputs` (the attention-maps files), `setup`
(checks and model loading shared by both commands). The commands `vrh-lmms attention-maps` and `vrh-lmms locate`
sit on top; docs/applications.md describes them.
"""
