[inputs: ["{mix,.formatter}.exs", "{lib,test}/**/*.{ex,exs}"], line_length: 120]
