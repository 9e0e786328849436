// Safetensors: writer -> reader round trips (every dtype, scalars, empty tensors, metadata,
// sharded checkpoints with their index), and every malformed-file and misuse error, each
// checked for its type and for naming the file and the tensor.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/safetensors.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Runs `f`, expects it to throw exactly an E whose message holds every one of `parts`.
template <typename E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos)
          << "message \"" << message << "\" does not mention \"" << part << "\"";
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw " << typeid(e).name() << " instead: " << e.what();
    return;
  }
  ADD_FAILURE() << "threw nothing";
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file image made by hand: length prefix, header text, then `data_bytes` zero bytes.
std::string file_image(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// A header with a single tensor "w" of the given dtype, shape and offsets (raw JSON text).
std::string one_tensor_header(const std::string& dtype, const std::string& shape,
                              const std::string& offsets) {
  return R"({"w": {"dtype": )" + dtype + R"(, "shape": )" + shape + R"(, "data_offsets": )" +
         offsets + "}}";
}

Tensor random_tensor(DType dtype, Shape shape, uint32_t seed) {
  Tensor t(dtype, std::move(shape));
  std::mt19937 rng(seed);
  auto* bytes = t.data<uint8_t>();
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  return t;
}

bool same_bytes(ConstTensorView a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.bytes(), b.view().bytes(), b.nbytes()) == 0;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("dsv4_safetensors_" + std::string(test->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `tensors` (name, tensor) to one file with SafetensorsWriter.
  fs::path write_file(const std::string& file_name,
                      const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                      const std::map<std::string, std::string>& metadata = {}) {
    std::vector<TensorSpec> specs;
    for (const auto& [name, t] : tensors) specs.push_back({name, t->dtype(), t->shape()});
    const fs::path path = dir_ / file_name;
    SafetensorsWriter writer(path, specs, metadata);
    for (const auto& [name, t] : tensors) writer.write(name, t->view());
    writer.finish();
    return path;
  }

  fs::path write_raw(const std::string& image, const std::string& file_name = "bad.safetensors") {
    const fs::path path = dir_ / file_name;
    write_bytes(path, image);
    return path;
  }

  // Expects opening the single-tensor file described by the arguments to fail with a
  // FormatError naming the file, tensor "w" and `detail`.
  void expect_bad_tensor(const std::string& dtype, const std::string& shape,
                         const std::string& offsets, size_t data_bytes, const std::string& detail) {
    SCOPED_TRACE(dtype + " " + shape + " " + offsets);
    const fs::path path =
        write_raw(file_image(one_tensor_header(dtype, shape, offsets), data_bytes));
    expect_error<FormatError>([&] { SafetensorsFile file(path); },
                              {path.string(), "tensor 'w'", detail});
  }

  fs::path dir_;
};

// ---- Round trips ----

TEST_F(SafetensorsTest, RoundTripsEveryDtypeScalarsEmptyTensorsAndMetadata) {
  struct Case {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {"bf16", DType::kBF16, {3, 5}},    {"f32", DType::kF32, {2, 3, 4}},
      {"e4m3", DType::kF8E4M3, {7}},     {"e8m0", DType::kF8E8M0, {3, 3}},
      {"i8", DType::kI8, {5, 1}},        {"u8", DType::kU8, {9}},
      {"i32", DType::kI32, {4, 2}},      {"i64", DType::kI64, {3}},
      {"scalar", DType::kF32, {}},       {"empty", DType::kBF16, {0}},
      {"empty_2d", DType::kI64, {4, 0}}, {"fp4", DType::kE2M1x2, {2, 3}},
  };
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < cases.size(); ++i)
    tensors.push_back(random_tensor(cases[i].dtype, cases[i].shape, static_cast<uint32_t>(i + 1)));
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (size_t i = 0; i < cases.size(); ++i) named.emplace_back(cases[i].name, &tensors[i]);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"source", "test"}};
  const fs::path path = write_file("all.safetensors", named, metadata);

  SafetensorsFile file(path);
  EXPECT_EQ(file.header().metadata, metadata);
  EXPECT_EQ(file.header().data_offset % 8, 0u);
  EXPECT_EQ(file.header().tensors.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const TensorInfo* info = file.find(cases[i].name);
    ASSERT_NE(info, nullptr);
    // Packed fp4 pairs are stored as I8, as in DeepSeek's checkpoints.
    EXPECT_EQ(info->dtype, cases[i].dtype == DType::kE2M1x2 ? DType::kI8 : cases[i].dtype);
    EXPECT_EQ(info->shape, cases[i].shape);
    EXPECT_TRUE(same_bytes(file.view(*info), tensors[i]));
  }
  EXPECT_EQ(file.find("absent"), nullptr);

  // The header is plain JSON padded with spaces, as the format's reference writer pads it.
  const std::string raw = read_bytes(path);
  const std::string header = raw.substr(8, file.header().data_offset - 8);
  const size_t json_end = header.find_last_not_of(' ') + 1;
  EXPECT_LT(header.size() - json_end, 8u);
  const json parsed = json::parse(header.substr(0, json_end));
  EXPECT_EQ(parsed["bf16"]["dtype"], "BF16");
  EXPECT_EQ(parsed["e4m3"]["dtype"], "F8_E4M3");
  EXPECT_EQ(parsed["e8m0"]["dtype"], "F8_E8M0");
  EXPECT_EQ(parsed["fp4"]["dtype"], "I8");
  EXPECT_EQ(parsed["__metadata__"]["source"], "test");

  // The data section holds exactly the tensors, back to back in spec order.
  uint64_t offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo& info = *file.find(cases[i].name);
    EXPECT_EQ(info.begin, offset) << cases[i].name;
    offset = info.end;
  }
  EXPECT_EQ(file.header().data_offset + offset, raw.size());
}

TEST_F(SafetensorsTest, CheckpointReadsASingleFile) {
  const Tensor a = random_tensor(DType::kF32, {2, 3}, 7);
  const fs::path path = write_file("one.safetensors", {{"a", &a}});
  const Checkpoint ckpt(path);
  EXPECT_EQ(ckpt.tensor_names(), std::vector<std::string>{"a"});
  EXPECT_TRUE(ckpt.contains("a"));
  EXPECT_FALSE(ckpt.contains("b"));
  EXPECT_EQ(ckpt.file_of("a"), path);
  EXPECT_TRUE(same_bytes(ckpt.get("a", DType::kF32, {2, 3}), a));
}

TEST_F(SafetensorsTest, ParsesAnInMemoryImageSortedByOffset) {
  const std::string header =
      R"({"b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
          "a": {"dtype": "I32", "shape": [], "data_offsets": [0, 4]},
          "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [2, 2]}})";
  const std::string image = file_image(header, 6);
  const SafetensorsHeader parsed =
      parse_safetensors_header(std::as_bytes(std::span(image)), "memory");
  ASSERT_EQ(parsed.tensors.size(), 3u);
  // An empty tensor inside another's range has no bytes, so it overlaps nothing.
  EXPECT_EQ(parsed.tensors[0].name, "a");
  EXPECT_EQ(parsed.tensors[1].name, "e");
  EXPECT_EQ(parsed.tensors[2].name, "b");
  EXPECT_EQ(parsed.data_offset, 8 + header.size());
  EXPECT_TRUE(parsed.metadata.empty());
}

TEST_F(SafetensorsTest, ShardedRoundTripThroughCheckpoint) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("a", random_tensor(DType::kF32, {4, 4}, 1));  // 64 bytes
  tensors.emplace_back("b", random_tensor(DType::kBF16, {8}, 2));    // 16: fills shard 1 (limit 80)
  tensors.emplace_back("c", random_tensor(DType::kI8, {100}, 3));    // over the limit: own shard
  tensors.emplace_back("d", random_tensor(DType::kF32, {2}, 4));     // 8: starts shard 3
  tensors.emplace_back("e", random_tensor(DType::kU8, {0}, 5));      // empty
  tensors.emplace_back("f", random_tensor(DType::kI64, {3}, 6));     // 24
  const std::map<std::string, std::string> expected_shard = {
      {"a", "model-00001-of-00003.safetensors"}, {"b", "model-00001-of-00003.safetensors"},
      {"c", "model-00002-of-00003.safetensors"}, {"d", "model-00003-of-00003.safetensors"},
      {"e", "model-00003-of-00003.safetensors"}, {"f", "model-00003-of-00003.safetensors"},
  };
  std::vector<TensorSpec> specs;
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) {
    specs.push_back({name, t.dtype(), t.shape()});
    total += t.nbytes();
  }
  const fs::path out = dir_ / "sharded";
  ShardedWriter writer(out, specs, 80);
  EXPECT_EQ(writer.num_shards(), 3u);
  EXPECT_EQ(writer.total_bytes(), total);
  for (const auto& [name, t] : tensors) writer.write(name, t.view());
  writer.finish();

  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(out)) files.push_back(entry.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{
                       "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                       "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));

  const json index = json::parse(read_bytes(out / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  const auto weight_map = index["weight_map"].get<std::map<std::string, std::string>>();
  EXPECT_EQ(weight_map, expected_shard);

  const Checkpoint ckpt(out);
  EXPECT_EQ(ckpt.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_EQ(ckpt.file_of(name), out / expected_shard.at(name));
    EXPECT_EQ(ckpt.info(name).shape, t.shape());
    EXPECT_TRUE(same_bytes(ckpt.get(name, t.dtype(), t.shape()), t));
  }
}

TEST_F(SafetensorsTest, ShardedWriterWithNoTensorsWritesOneEmptyShard) {
  ShardedWriter writer(dir_ / "empty", {}, 1000);
  writer.finish();
  const Checkpoint ckpt(dir_ / "empty");
  EXPECT_EQ(ckpt.size(), 0u);
  EXPECT_TRUE(fs::exists(dir_ / "empty" / "model-00001-of-00001.safetensors"));
}

TEST_F(SafetensorsTest, FolderWithoutIndexReadsEverySafetensorsFile) {
  const Tensor a = random_tensor(DType::kF32, {2}, 1);
  const Tensor b = random_tensor(DType::kI32, {3}, 2);
  write_file("x.safetensors", {{"a", &a}});
  write_file("y.safetensors", {{"b", &b}});
  write_bytes(dir_ / "notes.txt", "not a checkpoint file");
  const Checkpoint ckpt(dir_);
  EXPECT_EQ(ckpt.tensor_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ckpt.file_of("b"), dir_ / "y.safetensors");
  EXPECT_TRUE(same_bytes(ckpt.get("b"), b));
}

// ---- Malformed files ----

TEST_F(SafetensorsTest, FileShorterThanTheLengthPrefixIsTruncated) {
  for (const std::string& image : {std::string(), std::string("\x10\0\0\0\0", 5)}) {
    const fs::path path = write_raw(image);
    expect_error<FormatError>([&] { SafetensorsFile file(path); }, {path.string(), "truncated"});
  }
}

TEST_F(SafetensorsTest, FileShorterThanItsHeaderIsTruncated) {
  const fs::path path = write_raw(le64(100) + R"({"w": {"dtype": "F32")");
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "truncated", "100"});
}

TEST_F(SafetensorsTest, OversizedHeaderLengthIsRejected) {
  const fs::path path = write_raw(le64(kMaxSafetensorsHeaderBytes + 1) + "{}");
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "header length", "exceeds"});
}

TEST_F(SafetensorsTest, InvalidJsonIsRejected) {
  const fs::path path = write_raw(file_image(R"({"w": {"dtype": )", 0));
  expect_error<FormatError>([&] { SafetensorsFile file(path); }, {path.string(), "not valid JSON"});
}

TEST_F(SafetensorsTest, HeaderThatIsNotAnObjectIsRejected) {
  const fs::path path = write_raw(file_image("[1, 2]", 0));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "array", "not an object"});
}

TEST_F(SafetensorsTest, TensorDefinedTwiceIsRejected) {
  const std::string entry = R"({"dtype": "U8", "shape": [1], "data_offsets": [0, 1]})";
  const fs::path path = write_raw(file_image(R"({"w": )" + entry + R"(, "w": )" + entry + "}", 1));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "'w'", "more than once"});
}

TEST_F(SafetensorsTest, TensorEntryThatIsNotAnObjectOrLacksAFieldIsRejected) {
  fs::path path = write_raw(file_image(R"({"w": 3})", 0));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "tensor 'w'", "not an object"});
  path = write_raw(file_image(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "tensor 'w'", "\"shape\""});
}

TEST_F(SafetensorsTest, UnknownDtypeIsNamed) {
  expect_bad_tensor(R"("F16")", "[2]", "[0, 4]", 4, "unknown dtype \"F16\"");
  expect_bad_tensor("7", "[2]", "[0, 4]", 4, "dtype is not a string");
}

TEST_F(SafetensorsTest, BadShapesAreRejected) {
  expect_bad_tensor(R"("F32")", "[-1]", "[0, 0]", 0, "non-negative integer: -1");
  expect_bad_tensor(R"("F32")", "[1.5]", "[0, 0]", 0, "non-negative integer: 1.5");
  expect_bad_tensor(R"("F32")", "[[2]]", "[0, 0]", 0, "non-negative integer");
  expect_bad_tensor(R"("F32")", R"("3")", "[0, 0]", 0, "shape is not an array");
  expect_bad_tensor(R"("F32")", "[0, 9223372036854775808]", "[0, 0]", 0, "non-negative integer");
  // 2^62 elements of 4 bytes overflow 64 bits, even next to a zero dimension.
  expect_bad_tensor(R"("F32")", "[4611686018427387904]", "[0, 0]", 0, "too large");
  expect_bad_tensor(R"("F32")", "[0, 4611686018427387904, 4]", "[0, 0]", 0, "too large");
}

TEST_F(SafetensorsTest, DeeplyNestedShapeIsRejectedWithAShortMessage) {
  // 200,000 nested arrays: neither parsing nor the error message may recurse that deep.
  const size_t depth = 200'000;
  const std::string shape = std::string(depth, '[') + std::string(depth, ']');
  const fs::path path = write_raw(file_image(one_tensor_header(R"("F32")", shape, "[0, 0]"), 0));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "tensor 'w'", "shape [[...]] has an entry"});
}

TEST_F(SafetensorsTest, MalformedDataOffsetsAreRejected) {
  expect_bad_tensor(R"("U8")", "[4]", "[0]", 4, "not two non-negative integers");
  expect_bad_tensor(R"("U8")", "[4]", "[-1, 3]", 4, "not two non-negative integers");
  expect_bad_tensor(R"("U8")", "[4]", R"("0-4")", 4, "not two non-negative integers");
  expect_bad_tensor(R"("U8")", "[0]", "[4, 0]", 4, "begin after end");
}

TEST_F(SafetensorsTest, DataOffsetsOutOfRangeAreRejected) {
  const fs::path path = write_raw(file_image(
      R"({"layers.0.attn.wq_a.weight": {"dtype": "U8", "shape": [100], "data_offsets": [0, 100]}})",
      64));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "tensor 'layers.0.attn.wq_a.weight'",
                             "data_offsets [0, 100] out of range (data section is 64 bytes)"});
}

TEST_F(SafetensorsTest, ByteCountDifferentFromShapeIsRejected) {
  expect_bad_tensor(R"("F32")", "[4]", "[0, 8]", 16, "span 8 bytes but F32 [4] needs 16");
}

TEST_F(SafetensorsTest, OverlappingTensorsAreRejected) {
  const fs::path path = write_raw(file_image(
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
      24));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "tensor 'b'", "overlap", "tensor 'a'"});
}

TEST_F(SafetensorsTest, MetadataThatIsNotAStringMapIsRejected) {
  fs::path path = write_raw(file_image(R"({"__metadata__": {"format": "pt", "step": 3}})", 0));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "__metadata__", "'step'", "not a string"});
  path = write_raw(file_image(R"({"__metadata__": ["pt"]})", 0));
  expect_error<FormatError>([&] { SafetensorsFile file(path); },
                            {path.string(), "__metadata__", "not an object"});
}

TEST_F(SafetensorsTest, MissingFileIsAnIoError) {
  const fs::path path = dir_ / "absent.safetensors";
  expect_error<IoError>([&] { SafetensorsFile file(path); }, {path.string(), "cannot open"});
}

// ---- Checkpoint lookups ----

TEST_F(SafetensorsTest, MissingPathOrFolderWithoutFilesIsAnIoError) {
  expect_error<IoError>([&] { Checkpoint ckpt(dir_ / "nowhere"); },
                        {(dir_ / "nowhere").string(), "does not exist"});
  expect_error<IoError>([&] { Checkpoint ckpt(dir_); }, {dir_.string(), "no .safetensors"});
}

TEST_F(SafetensorsTest, MissingTensorIsNamedWithTheCheckpoint) {
  const Tensor a = random_tensor(DType::kF32, {2}, 1);
  write_file("m.safetensors", {{"a", &a}});
  const Checkpoint ckpt(dir_);
  const std::string expected = "tensor 'layers.0.w' not found in checkpoint " + dir_.string();
  expect_error<TensorError>([&] { ckpt.get("layers.0.w"); }, {expected});
  expect_error<TensorError>([&] { ckpt.info("layers.0.w"); }, {expected});
  expect_error<TensorError>([&] { ckpt.file_of("layers.0.w"); }, {expected});
}

TEST_F(SafetensorsTest, WrongShapeOrDtypeNamesFileTensorExpectedAndFound) {
  const Tensor w = random_tensor(DType::kF32, {2, 3}, 1);
  const fs::path path = write_file("m.safetensors", {{"w", &w}});
  const Checkpoint ckpt(dir_);
  expect_error<TensorError>(
      [&] {
        ckpt.get("w", DType::kF32, {3, 2});
      },
      {path.string(), "tensor 'w'", "expected f32 [3, 2], found f32 [2, 3]"});
  expect_error<TensorError>(
      [&] {
        ckpt.get("w", DType::kBF16, {2, 3});
      },
      {path.string(), "tensor 'w'", "expected bf16 [2, 3], found f32 [2, 3]"});
}

TEST_F(SafetensorsTest, SameTensorInTwoFilesWithoutIndexNamesBoth) {
  const Tensor w = random_tensor(DType::kF32, {2}, 1);
  const fs::path a = write_file("a.safetensors", {{"w", &w}});
  const fs::path b = write_file("b.safetensors", {{"w", &w}});
  expect_error<FormatError>([&] { Checkpoint ckpt(dir_); }, {"tensor 'w'", a.string(), b.string()});
}

// ---- Index files ----

class SafetensorsIndexTest : public SafetensorsTest {
 protected:
  // Shard s1 holds "a" and "b"; the index is `weight_map`.
  fs::path write_index(const json& weight_map) {
    const Tensor t = random_tensor(DType::kF32, {2}, 1);
    write_file("s1.safetensors", {{"a", &t}, {"b", &t}});
    const fs::path index = dir_ / "model.safetensors.index.json";
    write_bytes(index, json{{"weight_map", weight_map}}.dump());
    return index;
  }
};

TEST_F(SafetensorsIndexTest, ShardThatDoesNotExistIsAnIoError) {
  const fs::path index =
      write_index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "missing.safetensors"}});
  expect_error<IoError>([&] { Checkpoint ckpt(dir_); },
                        {index.string(), "missing.safetensors", "tensor 'c'", "does not exist"});
}

TEST_F(SafetensorsIndexTest, TensorAbsentFromItsShardIsATensorError) {
  const fs::path index =
      write_index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"ghost", "s1.safetensors"}});
  expect_error<TensorError>([&] { Checkpoint ckpt(dir_); },
                            {index.string(), "tensor 'ghost'", "s1.safetensors", "does not hold"});
}

TEST_F(SafetensorsIndexTest, TensorInAShardButNotInTheIndexIsRejected) {
  const fs::path index = write_index({{"a", "s1.safetensors"}});
  expect_error<FormatError>(
      [&] { Checkpoint ckpt(dir_); },
      {index.string(), "s1.safetensors", "tensor 'b'", "weight_map does not list"});
}

TEST_F(SafetensorsIndexTest, TensorInTwoShardsIsRejected) {
  const Tensor t = random_tensor(DType::kF32, {2}, 2);
  write_file("s2.safetensors", {{"b", &t}});
  const fs::path index = write_index({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  expect_error<FormatError>([&] { Checkpoint ckpt(dir_); },
                            {index.string(), "s1.safetensors", "tensor 'b'", "s2.safetensors"});
}

TEST_F(SafetensorsIndexTest, ShardNamesMayNotLeaveTheFolder) {
  for (const std::string shard : {"../s1.safetensors", "sub/s1.safetensors", "/s1.safetensors"}) {
    const fs::path index = write_index({{"a", "s1.safetensors"}, {"b", shard}});
    expect_error<FormatError>([&] { Checkpoint ckpt(dir_); },
                              {index.string(), "tensor 'b'", "'" + shard + "'", "not a file name"});
  }
}

TEST_F(SafetensorsIndexTest, MalformedIndexIsAFormatError) {
  const fs::path index = write_index(json::object());
  write_bytes(index, "{\"weight_map\": ");
  expect_error<FormatError>([&] { Checkpoint ckpt(dir_); }, {index.string(), "not valid JSON"});
  write_bytes(index, R"({"metadata": {}})");
  expect_error<FormatError>([&] { Checkpoint ckpt(dir_); }, {index.string(), "weight_map"});
  write_bytes(index, R"({"weight_map": {"a": 1}})");
  expect_error<FormatError>([&] { Checkpoint ckpt(dir_); }, {index.string(), "tensor 'a'"});
}

// ---- Writer misuse and failures ----

TEST_F(SafetensorsTest, WriterRejectsMisuseNamingFileAndTensor) {
  const Tensor a = random_tensor(DType::kF32, {2, 2}, 1);
  const Tensor b = random_tensor(DType::kI32, {3}, 2);
  const fs::path path = dir_ / "w.safetensors";
  SafetensorsWriter writer(path, {{"a", DType::kF32, {2, 2}}, {"b", DType::kI32, {3}}});
  expect_error<UsageError>([&] { writer.write("b", b.view()); },
                           {path.string(), "tensor 'b'", "out of order", "tensor 'a'"});
  expect_error<UsageError>(
      [&] { writer.write("a", ConstTensorView(a.view().bytes(), DType::kF32, {4})); },
      {path.string(), "tensor 'a'", "expected f32 [2, 2], given f32 [4]"});
  expect_error<UsageError>(
      [&] {
        writer.write("a", ConstTensorView(a.view().bytes(), DType::kI32, {2, 2}));
      },
      {path.string(), "tensor 'a'", "given i32"});
  expect_error<UsageError>([&] { writer.finish(); }, {path.string(), "0 of 2", "tensor 'a'"});
  writer.write("a", a.view());
  writer.write("b", b.view());
  expect_error<UsageError>([&] { writer.write("c", b.view()); },
                           {path.string(), "tensor 'c'", "after all 2"});
  writer.finish();
  const Checkpoint ckpt(path);
  EXPECT_TRUE(same_bytes(ckpt.get("b"), b));
}

TEST_F(SafetensorsTest, WriterRejectsInvalidSpecs) {
  const fs::path path = dir_ / "w.safetensors";
  expect_error<UsageError>(
      [&] {
        SafetensorsWriter w(path, {{"x", DType::kF32, {1}}, {"x", DType::kF32, {2}}});
      },
      {path.string(), "tensor 'x'", "more than once"});
  expect_error<UsageError>(
      [&] {
        SafetensorsWriter w(path, {{"x", DType::kF32, {2, -1}}});
      },
      {path.string(), "tensor 'x'", "negative"});
  expect_error<UsageError>(
      [&] {
        SafetensorsWriter w(path, {{"__metadata__", DType::kU8, {1}}});
      },
      {path.string(), "'__metadata__'"});
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsTest, UnfinishedWriterLeavesNoFile) {
  const Tensor a = random_tensor(DType::kF32, {2}, 1);
  const fs::path path = dir_ / "w.safetensors";
  {
    SafetensorsWriter writer(path, {{"a", DType::kF32, {2}}, {"b", DType::kF32, {2}}});
    writer.write("a", a.view());
    EXPECT_FALSE(fs::exists(path));  // only the .partial file exists until finish()
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsTest, UnfinishedShardedWriterLeavesNoFiles) {
  const Tensor a = random_tensor(DType::kF32, {4}, 1);
  const fs::path out = dir_ / "sharded";
  {
    ShardedWriter writer(
        out, {{"a", DType::kF32, {4}}, {"b", DType::kF32, {4}}, {"c", DType::kF32, {4}}}, 16);
    ASSERT_EQ(writer.num_shards(), 3u);
    writer.write("a", a.view());
    writer.write("b", a.view());
    EXPECT_TRUE(fs::exists(out / "model-00001-of-00003.safetensors"));
    expect_error<UsageError>([&] { writer.finish(); }, {out.string(), "tensor 'c'"});
  }
  EXPECT_TRUE(fs::is_empty(out));
}

// Lowers the file size limit so writes past it fail with EFBIG, as a full disk fails them.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = nullptr;
};

TEST_F(SafetensorsTest, FailedWriteIsAnIoErrorNamingTheFile) {
  const Tensor big = random_tensor(DType::kU8, {64 << 10}, 1);
  const fs::path path = dir_ / "w.safetensors";
  {
    const FileSizeLimit limit(4096);
    SafetensorsWriter writer(path, {{"big", DType::kU8, big.shape()}});
    writer.write("big", big.view());
    expect_error<IoError>([&] { writer.finish(); }, {path.string(), "write failed"});
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace dsv4
