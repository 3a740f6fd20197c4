//===- DropoutRng.h - the RNG every te dropout draws from -------*- C++ -*-===//
//
// This header is a convention, not an implementation detail: the reference
// interpreter, the passes that lower dropouts (they pick the streams) and
// the GPU kernels that apply them must all draw the same bits, so it is kept
// free of MLIR and usable from device code.
//
// Element `index` (its row-major flat index) of a dropout keyed by `seed`,
// `offset` and `stream` is kept iff `bits >= ceil(rate * 2^32)`, where
//
//   key  = sm(sm(sm(seed) ^ offset) ^ stream)
//   h    = sm(key ^ (index >> 1))
//   bits = index even ? h mod 2^32 : h >> 32         (its 32 random bits)
//
// and `sm` is SplitMix64's output function: one hash serves the pair of
// elements 2k, 2k + 1 (the GPU kernels are bound by the hash's 64-bit
// multiplies). Equivalently u = bits * 2^-32, uniform in [0, 1), is kept iff
// u >= rate; the threshold is an integer (keepThreshold), so that the
// device and this header compare the same bits. Kept elements are scaled
// by 1 / (1 - rate). Attention dropout indexes its probabilities as
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

/// sm(sm(sm(seed) ^ offset) ^ stream): the part of the chain shared by
/// every element of one dropout.
constexpr uint64_t streamKey(uint64_t seed, uint64_t offset, uint64_t stream) {
  return splitMix64(splitMix64(splitMix64(seed) ^ offset) ^ stream);
}

/// The 64 random bits of elements 2 `pair` (low half) and 2 `pair` + 1
/// (high half).
constexpr uint64_t pairBits(uint64_t key, uint64_t pair) {
  return splitMix64(key ^ pair);
}

/// The 32 random bits of element `index`: its half of its pair's hash.
constexpr uint32_t hashBits(uint64_t seed, uint64_t offset, uint64_t stream,
                            uint64_t index) {
  uint64_t h = pairBits(streamKey(seed, offset, stream), index >> 1);
  return static_cast<uint32_t>(index & 1 ? h >> 32 : h);
}

/// The uniform draw in [0, 1) of element `index`: bits * 2^-32 (exact).
constexpr double uniform(uint64_t seed, uint64_t offset, uint64_t stream,
                         uint64_t index) {
  return hashBits(seed, offset, stream, index) * 0x1p-32;
}

/// The least 32 random bits a dropout of `rate` keeps: ceil(rate * 2^32),
/// exactly, so that bits >= keepThreshold(rate) iff bits * 2^-32 >= rate.
/// 0 (rate 0) keeps every element, 2^32 (rate 1) none; the code emitter
/// writes it into the kernels.
constexpr uint64_t keepThreshold(double rate) {
  if (!(rate > 0))
    return 0;
  if (rate >= 1)
    return uint64_t(1) << 32;
  // Scaling by a power of two is exact, so only the ceiling remains.
  double scaled = rate * 0x1p32;
  auto whole = static_cast<uint64_t>(scaled);
  return whole + (static_cast<double>(whole) < scaled);
}

/// Whether a dropout of `rate` keeps element `index`.
constexpr bool keeps(double rate, uint64_t seed, uint64_t offset,
                     uint64_t stream, uint64_t index) {
  return hashBits(seed, offset, stream, index) >= keepThreshold(rate);
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
  /// te.transformer_layer with encoder_output (a decoder): the attention
  /// dropout of the cross-attention, and the hidden dropout after it.
  kCrossAttentionSite = 3,
  kCrossAttentionOutputSite = 4,
  /// te.transformer_layer with drop_path_rate: the drop path (stochastic
  /// depth) after the attention block and after the MLP.
  kAttentionDropPathSite = 5,
  kMlpDropPathSite = 6,
};

/// Streams reserved per layer op.
constexpr uint64_t kStreamsPerLayer = 16;

/// The stream of dropout `site` of the `layer`-th layer op of a function.
constexpr uint64_t layerStream(uint64_t layer, LayerDropoutSite site) {
  return kStreamsPerLayer * layer + site;
}

} // namespace tejit::dropout

#endif // TEJIT_COMPILER_INTERPRETER_DROPOUTRNG_H
