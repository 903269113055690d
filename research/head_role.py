"""Where one head's attention goes on held-out scenes (eager attention): from image-token rows and from the row that
predicts the first answer token, onto the referring words, the referent's image token and the other image tokens
(docs/demo-model-experiments.md, p5 seed 0: L0H4 against L4H10).

    python -m research.head_role CHECKPOINT LAYER HEAD [N]
"""

import sys

import numpy as np
import torch

from research.demo_model import evaluation as probe
from research.demo_model.data import FastEncoder
from research.demo_model.train import load_demo_model


def main() -> None:
    torch.set_num_threads(1)
    ck, layer, head = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    model, proc, spec = load_demo_model(ck)
    model.set_attn_implementation({"text_config": "eager", "vision_config": "sdpa"})
    tok = proc.tokenizer
    scenes = probe.held_out_scenes(spec, n, start=300_000)
    batch = probe.prepare(FastEncoder(proc, spec, scenes[0]), scenes, batch_size=n).batches[0]
    with torch.no_grad():
        att = model(**batch, output_attentions=True, use_cache=False).attentions[layer][:, head].float().numpy()
    ids = batch["input_ids"].numpy()
    image_id = model.config.image_token_id
    side = int(np.sqrt((ids[0] == image_id).sum()))
    stats: dict[str, list[float]] = {}
    for b, scene in enumerate(scenes):
        row, a = ids[b], att[b]
        img = np.where(row == image_id)[0]
        ref_obj = scene.objects[scene.target]
        words = [i for i, t in enumerate(row) if tok.decode([t]).strip() in (ref_obj.colour, ref_obj.shape)]
        x, y, _, _ = ref_obj.bbox
        ref = img[int(y // spec.scene["grid_cell"]) * side + int(x // spec.scene["grid_cell"])]
        last = int(np.where(batch["attention_mask"][b].numpy() > 0)[0][-1])
        other_prompt = [i for i in range(img[0]) if i not in words]
        self_mass = np.mean([a[i, i] for i in img])
        for key, value in (("image rows -> referring words", a[img][:, words].sum(1).mean()),
                           ("image rows -> other image tokens", a[img][:, img].sum(1).mean() - self_mass),
                           ("image rows -> other prompt tokens", a[img][:, other_prompt].sum(1).mean()),
                           ("answer row -> referent's token", a[last, ref]),
                           ("answer row -> other image tokens", a[last, img].sum() - a[last, ref]),
                           ("answer row -> referring words", a[last, words].sum())):
            stats.setdefault(key, []).append(float(value))
    print(ck, f"L{layer}H{head}", {k: round(float(np.mean(v)), 3) for k, v in stats.items()})


if __name__ == "__main__":
    main()
