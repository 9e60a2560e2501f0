// core/mmap_file.h: release_file_pages drops the whole pages of a range in a
// file mapping from the resident set (the present bit of /proc/self/pagemap
// goes to 0), keeps the partial pages at its ends, loses no bytes (a later
// read gets the file's contents back), and leaves memory outside file
// mappings alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "core/page_present.h"

namespace ember {
namespace {


uint8_t pattern(size_t i) { return static_cast<uint8_t>((i * 131 + 7) >> 3); }

TEST(MmapFile, ReleasedFilePagesLeaveTheResidentSetAndReadBackTheSame) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = 64 * page;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ember_mmap_" + std::to_string(getpid()))).string();
  {
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = pattern(i);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(size));
  }
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const uint8_t* d = m->data();
  uint64_t sum = 0;
  for (size_t i = 0; i < size; i += page) sum += d[i + 5];
  EXPECT_GT(sum, 0u);
  for (size_t i = 0; i < size; i += page) ASSERT_TRUE(page_present(d + i)) << "page " << i / page << " not touched";

  // From the middle of page 2 to the middle of page 40: pages 3 .. 39 go.
  const size_t released = release_file_pages(d + 2 * page + 100, 38 * page, file_mappings());
  EXPECT_EQ(released, 37 * page);
  EXPECT_TRUE(page_present(d + 2 * page));
  EXPECT_TRUE(page_present(d + 40 * page));
  for (size_t p = 3; p < 40; ++p) EXPECT_FALSE(page_present(d + p * page)) << "page " << p << " is still resident";
  for (size_t i = 0; i < size; ++i)
    if (d[i] != pattern(i)) FAIL() << "byte " << i << " changed after the release";

  EXPECT_TRUE(in_file_mapping(d, size, file_mappings()));
  EXPECT_FALSE(in_file_mapping(d, size + 64 * page, file_mappings()));  // runs past the mapping

  // Heap memory is not a file mapping: left alone.
  std::vector<uint8_t> heap(8 * page, 1);
  EXPECT_FALSE(in_file_mapping(heap.data(), heap.size(), file_mappings()));
  EXPECT_EQ(release_file_pages(heap.data(), heap.size(), file_mappings()), 0u);
  for (uint8_t v : heap) ASSERT_EQ(v, 1);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ember
