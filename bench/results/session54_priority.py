# Session 54: the priority variant of session54_fused_rows.sh, not merged: grids of up to 16 blocks
# launched at the device's greatest priority, graphs instantiated to use node priorities. Run
# from a working tree's root: python3 bench/results/session54_priority.py
p='src/kernels/launch.cuh'; s=open(p).read()
old='''  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;'''
new='''  static const int greatest = [] {
    int least = 0, most = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &most));
    return most;
  }();
  cudaLaunchAttribute attribute[2]{};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  attribute[1].id = cudaLaunchAttributePriority;
  attribute[1].val.priority = greatest;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = static_cast<unsigned long long>(grid.x) * grid.y * grid.z <= 16 ? 2 : 1;'''
assert old in s; s=s.replace(old,new,1); open(p,'w').write(s)
p='src/backend/cuda/cuda_ops.cpp'; s=open(p).read()
old='cudaGraphInstantiate(&exec, graph, 0)'
assert old in s
s=s.replace(old,'cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority)',1); open(p,'w').write(s)
