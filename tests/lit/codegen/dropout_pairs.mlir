// te.dropout: one hash serves an even-aligned pair of elements. With even
// rows and vectors, element i of a vector is in pair (row * cols + col) / 2
// + i / 2 and the unrolled loop hashes each pair once; an odd row length
// breaks the alignment, and each element hashes its own pair, index / 2.
// RUN: te-compile %s --inference --emit=cuda | FileCheck %s

// CHECK-LABEL: ===== kernel even_dropout_0:
// CHECK: constexpr int kVec = 2, kUnroll = 4;
// CHECK: const tj_u64 key0 = tj_dropout_key(rng[0], rng[1], 3ull);
// CHECK-NEXT: static_assert(kVec % 2 == 0, "dropout pairs need even vectors");
// CHECK: const unsigned keep0_pair = tj_dropout_keeps2(key0, static_cast<tj_u64>(row * 6 + col) / 2 + i / 2, 2147483648ull);
// CHECK-NEXT: const bool keep0 = keep0_pair >> (i & 1) & 1u;
func.func @even(%x: tensor<5x6xbf16> {te.name = "x"},
                %rng: tensor<2xi64> {te.name = "rng"})
    -> tensor<5x6xbf16> {
  %y = te.dropout %x, %rng {rate = 0.5 : f64, stream = 3 : i64}
      : tensor<5x6xbf16>, tensor<2xi64> -> tensor<5x6xbf16>
  return %y : tensor<5x6xbf16>
}

// CHECK-LABEL: ===== kernel odd_dropout_0:
// CHECK: constexpr int kVec = 1, kUnroll = 4;
// CHECK-NOT: static_assert
// CHECK: const bool keep0 = tj_dropout_keeps(key0, static_cast<tj_u64>(row * 7 + col + i), 1073741824ull);
func.func @odd(%x: tensor<3x7xbf16> {te.name = "x"},
               %rng: tensor<2xi64> {te.name = "rng"})
    -> tensor<3x7xbf16> {
  %y = te.dropout %x, %rng {rate = 0.25 : f64, stream = 3 : i64}
      : tensor<3x7xbf16>, tensor<2xi64> -> tensor<3x7xbf16>
  return %y : tensor<3x7xbf16>
}

// Drop path (group): runs of 12 elements, 2 rows of 6, share one draw, so
// a row draws once, by row / 2.
// CHECK-LABEL: ===== kernel grouped_dropout_0:
// CHECK-NOT: dropout pairs need even vectors
// CHECK: const bool keep0 = tj_dropout_keeps(key0, static_cast<tj_u64>(row / 2), 2147483648ull);
func.func @grouped(%x: tensor<4x6xbf16> {te.name = "x"},
                   %rng: tensor<2xi64> {te.name = "rng"})
    -> tensor<4x6xbf16> {
  %y = te.dropout %x, %rng {rate = 0.5 : f64, stream = 5 : i64, group = 12 : i64}
      : tensor<4x6xbf16>, tensor<2xi64> -> tensor<4x6xbf16>
  return %y : tensor<4x6xbf16>
}
