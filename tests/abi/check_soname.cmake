# cmake -DLIBRARY=<path> -DSONAME=<expected> -P check_soname.cmake
# Fails unless the ELF dynamic section of LIBRARY names exactly SONAME.
if(NOT EXISTS "${LIBRARY}")
  message(FATAL_ERROR "${LIBRARY} does not exist (build the library first)")
endif()
find_program(READELF readelf REQUIRED)
execute_process(COMMAND "${READELF}" -d "${LIBRARY}"
  OUTPUT_VARIABLE _dyn RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIBRARY} failed (${_rc})")
endif()
string(REGEX MATCHALL "Library soname: \\[[^]]*\\]" _sonames "${_dyn}")
if(NOT _sonames STREQUAL "Library soname: [${SONAME}]")
  message(FATAL_ERROR "expected SONAME ${SONAME} in ${LIBRARY}, found: '${_sonames}'")
endif()
message(STATUS "SONAME ${SONAME}: ok")
