//===- TEMoeOps.td - mixture-of-experts token permutation ops -*- tablegen -*-===//
//
// Transformer Engine's MoE token permutation (transformer_engine.pytorch's
// moe_permute, moe_unpermute and moe_sort_chunks_by_index;
// docs/moe-permutation.md). Tokens are the rows of a [T, H] matrix; a
// permutation moves whole rows. Which rows are real is known only at run
// time: `counts`, an i32 [2] host argument, holds
//   counts[0] = the tokens (real rows of the token-side tensors [T, .]),
//   counts[1] = the permuted rows (real rows of the expert-side [O, .]),
// so one program serves every token count up to its capacities T and O.
// Rows past the counts are neither read nor written.
//
// The row map (`row_map`, i32 [T, C]) is what ties the two sides together:
// element (t, c) is the expert-side row that column c of token t's routing
// goes to, or -1 (not routed, or dropped). For a mask routing map C is the
// number of experts (column e = expert e); for an index map C is topK
// (column k = the k-th choice). Probabilities have the row map's shape.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECT_TE_MOE_OPS_TD
#define TEJIT_DIALECT_TE_MOE_OPS_TD

include "TEPrimitiveOps.td"

def TE_MoeRowMapOp : TE_PrimOp<"moe_row_map"> {
  let summary = "The row map of a routing map (tokens grouped by expert)";
  let description = [{
    Expert-side rows are the routed (token, expert) pairs ordered by expert,
    then by token: the pair (t, e) goes to row
    `sum_{e' < e} count(e') + #{t' < t routed to e}` (count(e) = the real
    tokens routed to e). Rows at and past counts[1] are dropped (-1): with
    fewer output rows than routed pairs, the last experts' last tokens go,
    as Transformer Engine drops them.

    Without `index_map`, `routing_map` is a mask [T, E] (i1 or i32; nonzero
    = routed) and `num_experts` must be E. With `index_map` it is i32
    [T, topK] of expert ids in [0, num_experts): column k routes the token
    to expert routing_map[t, k]; an id out of range, or one a token names a
    second time, maps to -1. The result is i32 with `routing_map`'s shape.

    ```mlir
    %map = te.moe_row_map %routing, %counts {num_experts = 8 : i64}
        : (tensor<4096x8xi1>, tensor<2xi32>) -> tensor<4096x8xi32>
    ```
  }];
  let arguments = (ins TE_AnyTensor:$routing_map, TE_AnyTensor:$counts,
                   I64Attr:$num_experts, UnitAttr:$index_map);
  let results = (outs TE_AnyTensor:$row_map);
  let assemblyFormat = [{
    $routing_map `,` $counts attr-dict `:` functional-type(operands, results)
  }];
}

def TE_MoeChunkRowMapOp : TE_PrimOp<"moe_chunk_row_map"> {
  let summary = "The row map that sorts chunks of rows (moe_sort_chunks)";
  let description = [{
    The rows [T, .] are cut into n consecutive chunks of `split_sizes`
    (i32 [n]) rows; the output lays them out in the order `sorted_index`
    (i32 [n], a permutation of 0..n-1) names: output chunk j is input chunk
    sorted_index[j]. The result (i32 [T, 1]) is the row map of that
    permutation: input row t goes to output row row_map[t, 0]. Rows at and
    past min(sum(split_sizes), counts[0]) are not written. n <= 2048.

    ```mlir
    %map = te.moe_chunk_row_map %splits, %sorted, %counts
        : (tensor<64xi32>, tensor<64xi32>, tensor<2xi32>) -> tensor<16384x1xi32>
    ```
  }];
  let arguments = (ins TE_AnyTensor:$split_sizes, TE_AnyTensor:$sorted_index,
                   TE_AnyTensor:$counts);
  let results = (outs TE_AnyTensor:$row_map);
  let assemblyFormat = [{
    $split_sizes `,` $sorted_index `,` $counts attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_MoePermuteOp : TE_PrimOp<"moe_permute"> {
  let summary = "Copies token rows to their expert-side rows";
  let description = [{
    `output[row_map[t, c]] = input[t]` for every real token t and column c
    with row_map[t, c] >= 0 (a token's row copied once per expert that
    takes it; FP8 rows are copied as bytes). With `probs` ([T, C], a float
    type), `permuted_probs[row_map[t, c]] = probs[t, c]` ([O], probs'
    type). `input` [T, H], output [O, H] of its element type.

    ```mlir
    %rows, %p = te.moe_permute %x, %map, %counts probs(%probs)
        : (tensor<4096x1024xbf16>, tensor<4096x8xi32>, tensor<2xi32>,
           tensor<4096x8xf32>) -> (tensor<8192x1024xbf16>, tensor<8192xf32>)
    ```
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$row_map,
                   TE_AnyTensor:$counts, Optional<TE_AnyTensor>:$probs);
  let results = (outs TE_AnyTensor:$output,
                 Optional<TE_AnyTensor>:$permuted_probs);
  let assemblyFormat = [{
    $input `,` $row_map `,` $counts (`probs` `(` $probs^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_MoeUnpermuteOp : TE_PrimOp<"moe_unpermute"> {
  let summary = "Sums each token's expert-side rows, optionally weighted";
  let description = [{
    `output[t] = sum_c w(t, c) input[row_map[t, c]]` over the columns with
    row_map[t, c] >= 0, in column order, accumulated in f32 and rounded once
    to the output's type; w = `probs[t, c]` when given, else 1. A token no
    expert kept is 0. `input` [O, H] (bf16, f16, f32), output [T, H] of its
    type; `probs` [T, C]. The backward of te.moe_permute (without probs).
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$row_map,
                   TE_AnyTensor:$counts, Optional<TE_AnyTensor>:$probs);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input `,` $row_map `,` $counts (`probs` `(` $probs^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_MoeUnpermuteGradOp : TE_PrimOp<"moe_unpermute_grad"> {
  let summary = "The gradients of te.moe_unpermute with probs";
  let description = [{
    For `grad` [T, H], the gradient of te.moe_unpermute's output, and that
    op's `input` [O, H] and `probs` [T, C]: for each kept (t, c) with
    r = row_map[t, c], `input_grad[r] = probs[t, c] grad[t]` and
    `probs_grad[t, c] = dot(input[r], grad[t])` (f32 accumulation);
    probs_grad is 0 where row_map is -1. One pass reads grad once.

    ```mlir
    %dx, %dp = te.moe_unpermute_grad %dy, %rows, %map, %counts, %probs
        : (tensor<4096x1024xbf16>, tensor<8192x1024xbf16>, tensor<4096x8xi32>,
           tensor<2xi32>, tensor<4096x8xf32>)
          -> (tensor<8192x1024xbf16>, tensor<4096x8xf32>)
    ```
  }];
  let arguments = (ins TE_AnyTensor:$grad, TE_AnyTensor:$input,
                   TE_AnyTensor:$row_map, TE_AnyTensor:$counts,
                   TE_AnyTensor:$probs);
  let results = (outs TE_AnyTensor:$input_grad, TE_AnyTensor:$probs_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $row_map `,` $counts `,` $probs attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_MoeGatherProbsOp : TE_PrimOp<"moe_gather_probs"> {
  let summary = "Expert-side probabilities back to the row map's shape";
  let description = [{
    `output[t, c] = permuted_probs[row_map[t, c]]`, 0 where row_map is -1:
    the gradient of te.moe_permute's `probs` from that of its
    `permuted_probs` ([O] -> [T, C], the same float type).
  }];
  let arguments = (ins TE_AnyTensor:$permuted_probs, TE_AnyTensor:$row_map,
                   TE_AnyTensor:$counts);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $permuted_probs `,` $row_map `,` $counts attr-dict
    `:` functional-type(operands, results)
  }];
}

#endif // TEJIT_DIALECT_TE_MOE_OPS_TD
