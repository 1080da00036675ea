"""BERT's input layout in plain Python: a text or a text pair cut to the
sequence length and laid out as [CLS] a [SEP] (b [SEP]) with its segment
ids and mask (`pack_sequence_pair`), and the overlapping windows that read
a text too long for one input (`window_spans`).

In: word pieces and lengths. Out: token and id lists, windows. Needs no
TensorFlow.
"""

import collections


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Shortens two token lists in place until together they hold at most
    `max_length` tokens, always dropping the last token of the longer list
    (of `tokens_b` when both are equally long).

    Trimming the longer side keeps most of a short text, where each token
    tends to carry more information than a token of a long one.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        longer.pop()


def pack_sequence_pair(tokens_a, tokens_b, max_seq_length, tokenizer):
    """Lays out one text or a text pair the way BERT reads it.

      one text:  [CLS] a1 a2 a3 [SEP]             segment ids 0 0 0 0 0
      a pair:    [CLS] a1 a2 [SEP] b1 b2 b3 [SEP] segment ids 0 0 0 0 1 1 1 1

    Too long inputs are cut first: a single text at its end, a pair with
    `truncate_seq_pair`. The id lists are then zero-padded to max_seq_length.

    Args:
      tokens_a: word pieces of the first text (a pair's is shortened in
        place).
      tokens_b: word pieces of the second text; None or empty for one text.
      max_seq_length: length of the returned id lists.
      tokenizer: FullTokenizer, to map tokens to ids.

    Returns:
      (tokens, input_ids, input_mask, segment_ids): the tokens with [CLS] and
      [SEP] and without padding, then three lists of max_seq_length ints;
      input_mask is 1 on real tokens and 0 on padding.
    """
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS], 2 x [SEP]
    else:
        tokens_a = tokens_a[:max_seq_length - 2]  # [CLS], [SEP]

    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)

    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = [0] * (max_seq_length - len(input_ids))
    return tokens, input_ids + padding, input_mask + padding, segment_ids + padding


Span = collections.namedtuple("Span", ["start", "length"])


def window_spans(num_pieces, max_pieces, doc_stride, max_windows=0):
    """The windows that read a text of `num_pieces` pieces, at most
    `max_pieces` at a time (the reading of long texts in run_classifier,
    run_ner and run_squad).

    Each window starts `doc_stride` pieces after the previous one (or right
    after its end, when the stride is longer than the window), and the last
    one reaches the text's end. Hand-worked: 10 pieces, 4 per window, stride
    2 give (0, 4), (2, 4), (4, 4), (6, 4).

    Args:
      num_pieces: length of the text (0: no windows).
      max_pieces: the most pieces a window holds (>= 1).
      doc_stride: pieces from one window's start to the next's (>= 1).
      max_windows: keep only the first this many windows (0: all).

    Returns:
      list of Span(start, length).
    """
    spans = []
    start = 0
    while start < num_pieces and not (max_windows and len(spans) >= max_windows):
        length = min(max_pieces, num_pieces - start)
        spans.append(Span(start, length))
        if start + length >= num_pieces:
            break
        start += min(length, doc_stride)
    return spans
