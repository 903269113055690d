"""Independent references the tests compare the product with: a hand-written ablation through
transformers' attention interface, eager attention probabilities, and a stand-in of InternVL's
published remote-code model."""
