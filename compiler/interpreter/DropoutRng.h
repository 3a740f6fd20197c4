//===- DropoutRng.h - the RNG every te dropout draws from -------*- C++ -*-===//
//
// This header is a convention, not an implementation detail: the reference
// interpreter, the passes that lower dropouts (they pick the streams) and
// the GPU kernels that apply them must all draw the same bits, so it is kept
// free of MLIR and usable from device code.
//
// Element `index` (its row-major flat index) of a dropout keyed by `seed`,
// `offset` and `stream` is kept iff `u >= rate`, where
//
//   h = sm(sm(sm(sm(seed) ^ offset) ^ stream) ^ index)
//   u = (h >> 11) * 2^-53                          (uniform in [0, 1))
//
// and `sm` is SplitMix64's output function; kept elements are scaled by
// 1 / (1 - rate). Attention dropout indexes its probabilities as
// [b, heads, s_q, s_kv].
//
// Where the key comes from:
// - te.dropout and te.attention(_bwd): `rng_state` = [seed, offset], and the
//   op's `stream` attribute.
// - Layer ops (which have no rng operand): the seed and offset the runtime
//   passes for the whole function, and stream `layerStream(layer, site)`,
//   where `layer` counts the te layer ops of the function in order, from 0
//   (te.layernorm, rmsnorm, linear, layernorm_linear, layernorm_mlp,
//   dot_product_attention, multihead_attention and transformer_layer, whether
//   or not they have dropouts), and `site` is one of LayerDropoutSite.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_INTERPRETER_DROPOUTRNG_H
#define TEJIT_COMPILER_INTERPRETER_DROPOUTRNG_H

#include <cstdint>

namespace tejit::dropout {

/// SplitMix64's output function (Steele, Lea and Flood), applied to `x`.
constexpr uint64_t splitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The 64 random bits of element `index`.
constexpr uint64_t hashBits(uint64_t seed, uint64_t offset, uint64_t stream,
                            uint64_t index) {
  return splitMix64(splitMix64(splitMix64(splitMix64(seed) ^ offset) ^ stream) ^
                    index);
}

/// The uniform draw in [0, 1) of element `index`: the top 53 bits.
constexpr double uniform(uint64_t seed, uint64_t offset, uint64_t stream,
                         uint64_t index) {
  return static_cast<double>(hashBits(seed, offset, stream, index) >> 11) *
         0x1.0p-53;
}

/// Whether a dropout of `rate` keeps element `index`.
constexpr bool keeps(double rate, uint64_t seed, uint64_t offset,
                     uint64_t stream, uint64_t index) {
  return uniform(seed, offset, stream, index) >= rate;
}

/// Dropout sites of a layer op; each layer op owns 16 consecutive streams.
enum LayerDropoutSite : uint64_t {
  /// Attention dropout (on the softmax probabilities) of
  /// te.dot_product_attention, te.multihead_attention, te.transformer_layer.
  kAttentionSite = 0,
  /// te.transformer_layer: the hidden dropout after the attention projection.
  kAttentionOutputSite = 1,
  /// te.transformer_layer: the hidden dropout after the MLP.
  kMlpOutputSite = 2,
};

/// Streams reserved per layer op.
constexpr uint64_t kStreamsPerLayer = 16;

/// The stream of dropout `site` of the `layer`-th layer op of a function.
constexpr uint64_t layerStream(uint64_t layer, LayerDropoutSite site) {
  return kStreamsPerLayer * layer + site;
}

} // namespace tejit::dropout

#endif // TEJIT_COMPILER_INTERPRETER_DROPOUTRNG_H
