"""`lmtransfer summary --translation`: each block measured on real modules beside its closed form, and the paper's
base model last (our closed form's 63,082,496 beside the paper's rounded "about 65M")."""

from __future__ import annotations

from lmtransfer.modeling.model import count_parameters
from lmtransfer.translation.model import (
    TranslationConfig,
    TranslationModel,
    expected_translation_parameters,
    parameter_breakdown,
)


def translation_parameter_table(config: TranslationConfig, origin: str = "") -> str:
    model = TranslationModel(config)
    blocks = parameter_breakdown(config)
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    encoder_layer, decoder_layer = model.encoder.layers[0], model.decoder.layers[0]
    output_params = sum(p.numel() for n, p in model.named_parameters() if n.startswith("output."))
    output_note = ("tied to the embedding" if config.tie_output else "D x V") + (" + V bias" if config.output_bias else "")
    rows = [
        ("shared embedding (V x D)", count_parameters(model.token_embedding), f"{v} x {d}"),
        (f"encoder layer x {config.n_encoder_layers}", count_parameters(encoder_layer) * config.n_encoder_layers,
         f"{count_parameters(encoder_layer):,} per layer = 4D^2+2DF+F+9D = {blocks['encoder_layer']:,}"),
        ("  self-attention (4(D^2+D))", count_parameters(encoder_layer.self_attn), "per layer"),
        (f"decoder layer x {config.n_decoder_layers}", count_parameters(decoder_layer) * config.n_decoder_layers,
         f"{count_parameters(decoder_layer):,} per layer = 8D^2+2DF+F+15D = {blocks['decoder_layer']:,}"),
        ("  masked self-attention (4(D^2+D))", count_parameters(decoder_layer.self_attn), "per layer"),
        ("  cross-attention (4(D^2+D))", count_parameters(decoder_layer.multihead_attn), "per layer"),
        ("  feed-forward (2DF+F+D)", count_parameters(decoder_layer.linear1) + count_parameters(decoder_layer.linear2),
         "per layer, the same in the encoder"),
        ("  layer norms (3 x 2D; encoder 2 x 2D)",
         sum(count_parameters(getattr(decoder_layer, f"norm{i}")) for i in (1, 2, 3)), "per layer"),
        ("final layer norms (2 x 2D)",
         sum(count_parameters(m.norm) for m in (model.encoder, model.decoder) if m.norm is not None),
         "on" if config.final_norms else "off: post-norm layers end normalised"),
        ("output projection", output_params, output_note),
        ("positional encoding (fixed)", 0, "sinusoidal buffer"),
        ("", None, ""),
        ("translation model total", count_parameters(model), f"formula {expected_translation_parameters(config):,}"),
        ("paper base (Vaswani et al.)", expected_translation_parameters(TranslationConfig.paper_base()),
         "V=37000 D=512 6+6 layers A=8 F=2048, tied, no output bias, no final norms (the paper: ~65M)"),
    ]
    width = max(len(r[0]) for r in rows[:-3])
    head = [f"encoder-decoder V={v} D={d} N_enc={config.n_encoder_layers} N_dec={config.n_decoder_layers} "
            f"A={config.n_heads} F={f}", *([origin] if origin else []), ""]
    return "\n".join(head + [f"{name:<{width}}  {count:>12,}  {note}" if count is not None else ""
                             for name, count, note in rows])
