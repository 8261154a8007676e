# Generates one man page from a header template (docs/man/*.md.in) and a
# document of docs/ (cmake -P, run by packaging/CMakeLists.txt):
#   TEMPLATE  the header: a go-md2man title block, NAME, SYNOPSIS, ...; its
#             line "@DOC@" is replaced by the document, @VERSION@ by VERSION
#   DOC       the document (docs/cli.md, docs/configuration.md)
#   OUTPUT    the roff page to write (akadzed.8); OUTPUT.gz is written too
#   MD2MAN    go-md2man, GZIP gzip, VERSION the project version
# The document's own title line (its first "# ..." heading) is dropped, and
# links to other documents become their text: a man page cannot follow them
# (the documents are in /usr/share/doc/akadzed/docs).
cmake_minimum_required(VERSION 3.25)

foreach(var TEMPLATE DOC OUTPUT MD2MAN GZIP VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "man-page.cmake: ${var} is not set")
  endif()
endforeach()

file(READ "${TEMPLATE}" page)
file(READ "${DOC}" body)
string(REGEX REPLACE "^# [^\n]*\n+" "" body "${body}")
# [text](target) -> text, except web links, which go-md2man renders itself.
string(REGEX REPLACE "\\[([^]\n]*)\\]\\(([^):\n]*)\\)" "\\1" body "${body}")
string(REPLACE "@VERSION@" "${VERSION}" page "${page}")
string(FIND "${page}" "\n@DOC@\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "man-page.cmake: ${TEMPLATE} has no line @DOC@")
endif()
string(REPLACE "\n@DOC@\n" "\n${body}\n" page "${page}")

file(WRITE "${OUTPUT}.md" "${page}")
execute_process(COMMAND "${MD2MAN}" -in "${OUTPUT}.md" -out "${OUTPUT}"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man-page.cmake: go-md2man failed on ${OUTPUT}.md: ${err}")
endif()
# go-md2man gives every table column its natural width and wraps only the
# long cells without markup, so tables overflow an 80-column terminal. Make
# every cell of the last column (the prose) and the long cells of the others
# text blocks, which wrap; the last column takes the width left over (tbl's
# x modifier). The roff is walked as a CMake list of lines, so the
# characters lists treat specially are swapped out meanwhile.
file(READ "${OUTPUT}" roff)
string(ASCII 28 kBackslash)
string(ASCII 29 kOpen)
string(ASCII 30 kClose)
string(ASCII 31 kSemicolon)
string(REPLACE "\\" "${kBackslash}" roff "${roff}")
string(REPLACE "[" "${kOpen}" roff "${roff}")
string(REPLACE "]" "${kClose}" roff "${roff}")
string(REPLACE ";" "${kSemicolon}" roff "${roff}")
string(REPLACE "\n" ";" lines "${roff}")
set(roff "")
# text; format: the .TS lines up to the one ending in "."; rows; block: T{ ... T}
set(state text)
set(continued FALSE)  # a text block ended in the middle of a row
foreach(line IN LISTS lines)
  if(state STREQUAL "text")
    if(line STREQUAL ".TS")
      set(state format)
    elseif(line MATCHES "^\\.TH ")
      # Ragged right and no hyphenation: narrow table columns read better.
      string(APPEND line "\n.nh\n.ad l")
    endif()
  elseif(state STREQUAL "format")
    string(REGEX MATCHALL "l" columns "${line}")
    list(LENGTH columns last_tab)
    math(EXPR last_tab "${last_tab} - 1")  # tabs before the last cell of a row
    if(line MATCHES "^l[ l]* \\.$")
      string(REGEX REPLACE "l \\.$" "lx ." line "${line}")
      set(state rows)
    elseif(line MATCHES "^l[ l]*$")
      string(REGEX REPLACE "l( *)$" "lx\\1" line "${line}")
    endif()
  elseif(state STREQUAL "rows")
    if(line STREQUAL ".TE")
      set(state text)
    else()
      if(continued)
        # go-md2man ends a text block with a newline even when the row goes
        # on; tbl wants the rest of the row on the T} line.
        string(REGEX REPLACE "\n$" "" roff "${roff}")
        set(continued FALSE)
      else()
        set(tabs 0)
      endif()
      # Cells of the row (or of its rest after a text block), by column.
      string(REPLACE "\t" ";" cells "${line}")
      set(line "")
      set(column ${tabs})
      foreach(cell IN LISTS cells)
        if(column GREATER tabs)
          string(APPEND line "\t")
        endif()
        string(LENGTH "${cell}" length)
        if(cell STREQUAL "T{")
          set(state block)
        elseif(length GREATER 0 AND (column EQUAL last_tab OR length GREATER 24 OR (column GREATER 0 AND length GREATER 20)))
          if(cell MATCHES "^[.']")  # would be a request at the start of a line
            set(cell "${kBackslash}&${cell}")
          endif()
          set(cell "T{\n${cell}\nT}")
        endif()
        string(APPEND line "${cell}")
        math(EXPR column "${column} + 1")
      endforeach()
      math(EXPR tabs "${column} - 1")
    endif()
  elseif(line STREQUAL "T}")
    set(state rows)
    if(tabs LESS last_tab)
      set(continued TRUE)
    endif()
  endif()
  string(APPEND roff "${line}\n")
endforeach()
string(REGEX REPLACE "\n$" "" roff "${roff}")
string(REPLACE "${kSemicolon}" ";" roff "${roff}")
string(REPLACE "${kClose}" "]" roff "${roff}")
string(REPLACE "${kOpen}" "[" roff "${roff}")
string(REPLACE "${kBackslash}" "\\" roff "${roff}")
file(WRITE "${OUTPUT}" "${roff}")
# Debian policy: man pages gzip -9n compressed (no name, no timestamp).
execute_process(COMMAND "${GZIP}" -9n -c "${OUTPUT}" OUTPUT_FILE "${OUTPUT}.gz"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man-page.cmake: gzip failed on ${OUTPUT}: ${err}")
endif()
