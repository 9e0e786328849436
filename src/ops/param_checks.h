// The argument checks of every op's Params, shared by all backends: validate once at the
// boundary, with one set of messages (each names the op, the argument and what was wrong). Each
// backend calls check_params(p) first and may then rely on the shapes and dtypes it checked.
#pragma once

#include "ops/ops.h"

namespace dsv4 {

void check_params(const AddBroadcastParams& p);
void check_params(const CompressorPoolParams& p);
void check_params(const CopyParams& p);
void check_params(const CopyRowsParams& p);
void check_params(const WriteCacheRowsParams& p);
void check_params(const EditLogitsParams& p);
void check_params(const MaskLogitsParams& p);
void check_params(const RowLogprobsParams& p);
void check_params(const SampleRowsParams& p);
void check_params(const DummyWeightParams& p);
void check_params(const EmbedParams& p);
void check_params(const GroupedLinearParams& p);
void check_params(const HadamardParams& p);
void check_params(const HcHeadParams& p);
void check_params(const HcPostParams& p);
void check_params(const HcPreParams& p);
void check_params(const IndexerTopkParams& p);
void check_params(const LinearParams& p);
void check_params(const MoeExpertsParams& p);
void check_params(const MoeExpertRowsParams& p);
void check_params(const MoeCombineParams& p);
void check_params(const MoeRouteParams& p);
void check_params(const NormRopeQuantParams& p);
void check_params(const QuantSimParams& p);
void check_params(const RmsNormParams& p);
void check_params(const RopeParams& p);
void check_params(const SparseAttentionParams& p);
void check_params(const SwigluParams& p);

}  // namespace dsv4
